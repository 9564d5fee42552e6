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
 * files' edges where they can ({@link #splitPoints}, {@code queuesource.split_points}); pushed
 * {@code id} filters ({@link QueuePushdown.Bounds}) cut those ranges, and ranges left empty are not
 * planned.
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
        /** The only ids read, as sorted runs {@code [lo, hi, ...]}: a stream's micro-batch's (the ids its
         * reader handed out) or a batch read's {@code id IN (...)}; null: every pending item. */
        public final long[] only;
        /** Whether {@link #only} is what a stream's reader handed out (every one must be read). */
        public final boolean handed;

        Part(String directory, String queue, String reader, long after, long upto, List<Segment> known, long bytes) {
            this(directory, queue, reader, after, upto, known, bytes, null, false, true);
        }

        /** With {@link #only}: whether handed-out items missing from the journal fail the read (else a warning). */
        public final boolean failOnDataLoss;

        /** A stream's micro-batch: the ids {@code only} its reader handed out. */
        Part(String directory, String queue, String reader, long after, long upto, List<Segment> known, long bytes,
             long[] only, boolean failOnDataLoss) {
            this(directory, queue, reader, after, upto, known, bytes, only, only != null, failOnDataLoss);
        }

        private Part(String directory, String queue, String reader, long after, long upto, List<Segment> known,
                     long bytes, long[] only, boolean handed, boolean failOnDataLoss) {
            this.only = only;
            this.handed = handed;
            this.failOnDataLoss = failOnDataLoss;
            this.directory = directory;
            this.queue = queue;
            this.reader = reader;
            this.after = after;
            this.upto = upto;
            this.known = known;
            this.bytes = bytes;
        }

        /**
         * This batch read's part narrowed to the ids {@code b} lets through (a batch read's pushed
         * filters): its range {@code (after, upto]} cut to {@code [b.lo, b.hi]}, and to the first
         * and last of {@code b.ids} in it, which become {@link #only}; null when no id is left.
         * The task then opens the journal files from the one holding the first id through the one
         * holding the last (no other file can hold one: ids increase through the journal), and
         * drops the rows outside as it fills the batches.
         */
        Part within(QueuePushdown.Bounds b) {
            long a = after < 0 ? b.lo - 1 : Math.max(after, b.lo - 1);
            long z = upto < 0 ? b.hi : Math.min(upto, b.hi);
            if (a >= z) {
                return null;
            }
            long[] runs = null;
            if (b.ids != null) {
                List<Long> in = new ArrayList<>();
                for (long x : b.ids) {
                    if (x > a && x <= z) {
                        in.add(x);
                    }
                }
                if (in.isEmpty()) {
                    return null;
                }
                runs = new long[2 * in.size()];
                for (int k = 0; k < in.size(); k++) {
                    runs[2 * k] = in.get(k);
                    runs[2 * k + 1] = in.get(k);
                }
                a = in.get(0) - 1;
                z = in.get(in.size() - 1);
            }
            // upto -1: unbounded (no id is above Long.MAX_VALUE).
            return new Part(directory, queue, reader, a, z == Long.MAX_VALUE ? -1 : z, known, bytes, runs, false,
                failOnDataLoss);
        }

        /** Whether any id in {@code [lo, hi]} is one of {@link #only}'s (always, when null). */
        boolean admitsAny(long lo, long hi) {
            if (only == null) {
                return true;
            }
            int at = firstRunEndingAtOrAbove(lo);
            return at < only.length / 2 && only[2 * at] <= hi;
        }

        /** The index of the first run of {@link #only} whose end is {@code >= x}. */
        private int firstRunEndingAtOrAbove(long x) {
            int lo = 0;
            int hi = only.length / 2;
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                if (only[2 * mid + 1] < x) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            return lo;
        }

        /** How many ids a stream's reader handed out ({@link #only}; -1: not a stream's micro-batch). */
        long onlyCount() {
            if (!handed) {
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
            return admitsAny(x, x);
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

    /** The partitions of a read of every pending item. */
    public static List<Part> plan(Hfs fs, List<String> directories, QueueOptions o) {
        return plan(fs, directories, o, new QueuePushdown.Bounds());
    }

    /**
     * The partitions of a read whose pushed filters let the ids of {@code b} through: the parts
     * of the whole backlogs, each narrowed to them ({@link Part#within}), those left with no id
     * not planned.  Their {@link Part#bytes}: the journal files that can hold ids of {@code b}.
     */
    public static List<Part> plan(Hfs fs, List<String> directories, QueueOptions o, QueuePushdown.Bounds b) {
        if (b.none()) {
            return new ArrayList<>();  // nothing can match: no file is read
        }
        List<Part> parts = new ArrayList<>();
        for (Part p : backlogs(fs, directories, o, b.narrowed() ? b : null)) {
            Part q = b.narrowed() ? p.within(b) : p;
            if (q != null) {
                parts.add(q);
            }
        }
        return parts;
    }

    /** The journal bytes of the files of {@code segs} that can hold ids in {@code [lo, hi]} (unknown spans count). */
    static long bytesWithin(Hfs fs, List<Segment> segs, long lo, long hi) {
        long bytes = 0;
        for (int k = 0; k < segs.size(); k++) {
            long first = segs.get(k).firstId;
            long next = k + 1 < segs.size() ? segs.get(k + 1).firstId : -1;
            if ((first < 0 || first <= hi) && (next < 0 || next > lo)) {
                bytes += Math.max(0, fs.size(segs.get(k).path));
            }
        }
        return bytes;
    }

    /** The partitions of the whole backlogs ({@code b} not null: their bytes are those of the files it reaches). */
    private static List<Part> backlogs(Hfs fs, List<String> directories, QueueOptions o, QueuePushdown.Bounds b) {
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
                    bytes = b == null ? bytesWithin(fs, segs, Long.MIN_VALUE, Long.MAX_VALUE)
                        : bytesWithin(fs, segs, b.first(), b.last());
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
