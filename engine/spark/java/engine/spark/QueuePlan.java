package engine.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * The plan of an {@code engine-queue} read, as {@code engine.spark.queuesource.QueueReader.partitions}
 * makes it: per queue of each directory ({@code diagnose.queue_names}) and per reader with a
 * checkpoint file (the default reader {@code ""} when none has one), id ranges of about
 * {@code bytesPerPartition} journal bytes, at least {@code minPartitions}, ending at journal
 * files' edges where they can ({@link #splitPoints}, {@code queuesource.split_points}).
 */
public final class QueuePlan {
    private QueuePlan() {
    }

    /** A writer (journal) file: its number, path and first id (-1: not known). */
    public static final class Segment implements Serializable {
        private static final long serialVersionUID = 1L;
        public final long number;
        public final String path;
        public final long firstId;

        Segment(long number, String path, long firstId) {
            this.number = number;
            this.path = path;
            this.firstId = firstId;
        }
    }

    /** The pending items of one reader of one queue with ids in (after, upto] (-1: unbounded). */
    public static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        public final String directory;
        public final String queue;
        public final String reader;
        public final long after;
        public final long upto;
        /** The writer files the plan listed with their first ids (not read again by the task). */
        public final List<Segment> known;
        /** The queue's journal bytes (statistics). */
        public final long bytes;
        /** A stream's micro-batch: the ids its reader handed out, as sorted runs {@code [lo, hi, ...]}
         * (only those are read); null: every pending item. */
        public final long[] only;

        Part(String directory, String queue, String reader, long after, long upto, List<Segment> known, long bytes) {
            this(directory, queue, reader, after, upto, known, bytes, null, true);
        }

        /** With {@link #only}: whether handed-out items missing from the journal fail the read (else a warning). */
        public final boolean failOnDataLoss;

        Part(String directory, String queue, String reader, long after, long upto, List<Segment> known, long bytes,
             long[] only, boolean failOnDataLoss) {
            this.only = only;
            this.failOnDataLoss = failOnDataLoss;
            this.directory = directory;
            this.queue = queue;
            this.reader = reader;
            this.after = after;
            this.upto = upto;
            this.known = known;
            this.bytes = bytes;
        }

        /** How many ids {@link #only} names (-1: null). */
        long onlyCount() {
            if (only == null) {
                return -1;
            }
            long n = 0;
            for (int k = 0; k < only.length; k += 2) {
                n += only[k + 1] - only[k] + 1;
            }
            return n;
        }

        /** Whether id {@code x} is one of {@link #only}'s (always, when null). */
        boolean admits(long x) {
            if (only == null) {
                return true;
            }
            int lo = 0;
            int hi = only.length / 2;
            while (lo < hi) {  // the first run whose end is >= x
                int mid = (lo + hi) >>> 1;
                if (only[2 * mid + 1] < x) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return lo < only.length / 2 && only[2 * lo] <= x;
        }
    }

    /** {@code diagnose.queue_names}: the queues with files in {@code directory}, sorted. */
    static List<String> queueNames(Hfs fs, String directory) {
        TreeSet<String> names = new TreeSet<>();
        for (String f : fs.list(directory)) {
            int dot = f.lastIndexOf('.');
            String rest = dot < 0 ? "" : f.substring(dot + 1);
            if (dot >= 0 && isDigits(rest)) {
                names.add(f.substring(0, dot));
            } else if (f.contains(".read.") && !f.contains("~")) {
                names.add(f.substring(0, f.indexOf(".read.")));
            }
        }
        List<String> out = new ArrayList<>();
        for (String n : names) {
            if (validQueueName(n)) {
                out.add(n);
            }
        }
        return out;
    }

    static boolean isDigits(String s) {
        if (s.isEmpty()) {
            return false;
        }
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            if (c < '0' || c > '9') {
                return false;
            }
        }
        return true;
    }

    /** {@code naming.check_queue_name} as a test (names whose files would collide are not queues). */
    static boolean validQueueName(String name) {
        if (name.isEmpty() || name.contains("/") || name.equals(".") || name.equals("..") || name.contains("~")
            || name.contains("\0")) {
            return false;
        }
        String[] parts = name.split("\\.", -1);
        for (int k = 1; k < parts.length; k++) {
            if (parts[k].equals("read") || parts[k].equals("rlock")) {
                return false;
            }
        }
        return name.getBytes(java.nio.charset.StandardCharsets.UTF_8).length + ".read.".length() + 2 + 20 <= 255;
    }

    /** {@code queuesource.reader_names}: readers with a checkpoint file, sorted; [""] if none. */
    static List<String> readerNames(Hfs fs, String directory, String queue) {
        TreeSet<String> names = new TreeSet<>();
        String prefix = queue + ".read.";
        for (String f : fs.list(directory)) {
            if (f.startsWith(prefix) && !f.contains("~")) {
                names.add(f.substring(prefix.length()));
            }
        }
        return names.isEmpty() ? List.of("") : new ArrayList<>(names);
    }

    /** The writer files of {@code queue} by number (no first id read). */
    static TreeMap<Long, String> writerFiles(Hfs fs, String directory, String queue) {
        TreeMap<Long, String> out = new TreeMap<>();
        String prefix = queue + ".";
        for (String f : fs.list(directory)) {
            if (f.startsWith(prefix) && isDigits(f.substring(prefix.length()))) {
                String digits = f.substring(prefix.length());
                if (digits.length() < 19) {
                    out.put(Long.parseLong(digits), Hfs.join(directory, f));
                }
            }
        }
        return out;
    }

    /**
     * {@code segments.list_segments}: the writer files, oldest first, with their first ids ({@code
     * known}'s not read again). {@code strict}: damage at the start of a finished file raises.
     */
    static List<Segment> listSegments(Hfs fs, String directory, String queue, boolean strict, List<Segment> known) {
        Map<Long, Segment> cached = new TreeMap<>();
        for (Segment s : known) {
            if (s.firstId >= 0) {
                cached.put(s.number, s);
            }
        }
        TreeMap<Long, String> files = writerFiles(fs, directory, queue);
        Long newest = files.isEmpty() ? null : files.lastKey();
        List<Segment> out = new ArrayList<>();
        for (Map.Entry<Long, String> e : files.entrySet()) {
            Segment s = cached.get(e.getKey());
            if (s != null) {
                out.add(s);
                continue;
            }
            if (!fs.exists(e.getValue())) {
                continue; // retired meanwhile
            }
            // The file's first write only (one read of a writer's batch, more if it is longer): the
            // plan stays O(files), not O(journal bytes).
            long size = fs.size(e.getValue());
            if (size < 0) {
                continue; // retired meanwhile
            }
            long want = QueueFiles.FIRST_READ;
            long first;
            while (true) {
                byte[] data = fs.readAt(e.getValue(), 0, (int) Math.min(size, want));
                first = QueueFiles.firstId(e.getValue(), data, data.length, strict && !e.getKey().equals(newest),
                    size);
                if (first != QueueFiles.MORE) {
                    break;
                }
                want *= 2;
            }
            out.add(new Segment(e.getKey(), e.getValue(), first));
        }
        return out;
    }

    /** The partitions of a read. */
    public static List<Part> plan(Hfs fs, List<String> directories, QueueOptions o) {
        List<Part> parts = new ArrayList<>();
        for (String directory : directories) {
            List<String> queues = queueNames(fs, directory);
            if (o.queues != null) {
                List<String> chosen = new ArrayList<>();
                if (queues.isEmpty()) {
                    chosen.addAll(new TreeSet<>(o.queues));
                } else {
                    for (String q : queues) {
                        if (o.queues.contains(q)) {
                            chosen.add(q);
                        }
                    }
                }
                queues = chosen;
            }
            for (String q : queues) {
                List<String> readers = new ArrayList<>();
                for (String r : readerNames(fs, directory, q)) {
                    if (o.readers == null || o.readers.contains(r)) {
                        readers.add(r);
                    }
                }
                if (readers.isEmpty()) {
                    continue;
                }
                List<Segment> segs;
                List<Long> points;
                long bytes = 0;
                try {
                    segs = listSegments(fs, directory, q, false, List.of());
                    for (Segment s : segs) {
                        bytes += Math.max(0, fs.size(s.path));
                    }
                    points = splitPoints(fs, segs, o.bytesPerPartition, o.minPartitions);
                } catch (CorruptFileException | java.io.UncheckedIOException e) {
                    // A damaged or vanishing file: no split (the reads report damage, per mode).
                    segs = List.of();
                    points = List.of();
                }
                List<Segment> known = new ArrayList<>();
                for (Segment s : segs) {
                    if (s.firstId >= 0) {
                        known.add(s);
                    }
                }
                List<Long> bounds = new ArrayList<>();
                bounds.add(-1L);
                bounds.addAll(points);
                bounds.add(-1L);
                for (String r : readers) {
                    for (int k = 0; k + 1 < bounds.size(); k++) {
                        parts.add(new Part(directory, q, r, bounds.get(k), bounds.get(k + 1), known, bytes));
                    }
                }
            }
        }
        return parts;
    }

    /** {@code queuesource.split_points}: ids at which a reader's backlog is split. */
    static List<Long> splitPoints(Hfs fs, List<Segment> listed, long perPartition, long minPartitions) {
        List<Segment> segs = new ArrayList<>();
        for (Segment s : listed) {
            if (s.firstId >= 0) {
                segs.add(s);
            }
        }
        List<long[]> files = new ArrayList<>(); // (first id, ids, bytes)
        for (int k = 0; k < segs.size(); k++) {
            long size = fs.size(segs.get(k).path);
            if (k + 1 < segs.size()) {
                files.add(new long[] {segs.get(k).firstId, segs.get(k + 1).firstId - segs.get(k).firstId, size});
            } else {
                long doneIds = 0;
                long doneBytes = 0;
                for (long[] f : files) {
                    doneIds += f[1];
                    doneBytes += f[2];
                }
                files.add(new long[] {segs.get(k).firstId, doneBytes != 0 ? Math.floorDiv(size * doneIds, doneBytes) : 0,
                    size});
            }
        }
        long total = 0;
        for (long[] f : files) {
            total += f[2];
        }
        long per = Math.max(1, perPartition);
        if (minPartitions > 1 && total != 0) {
            per = Math.max(1, Math.min(per, -Math.floorDiv(-total, minPartitions)));
        }
        long pieces = -Math.floorDiv(-total, per);
        TreeSet<Long> points = new TreeSet<>();
        for (long k = 1; k < pieces; k++) {
            long target = Math.floorDiv(total * k, pieces);
            long at = 0;
            for (int index = 0; index < files.size(); index++) {
                long first = files.get(index)[0];
                long ids = files.get(index)[1];
                long size = files.get(index)[2];
                if (at + size > target) {
                    boolean newest = index == files.size() - 1;
                    if (size > per) {
                        if (ids != 0) {
                            points.add(first - 1 + Math.floorDiv(ids * (target - at), size));
                        }
                    } else if (index > 0 && (newest || target - at <= at + size - target)) {
                        points.add(first - 1);
                    } else if (!newest) {
                        points.add(first + ids - 1);
                    }
                    break;
                }
                at += size;
            }
        }
        List<Long> out = new ArrayList<>();
        for (long p : points) {
            if (!files.isEmpty() && p >= files.get(0)[0]) {
                out.add(p);
            }
        }
        return out;
    }
}
