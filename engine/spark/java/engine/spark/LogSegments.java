package engine.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * Which records of an append-log dataset are visible: the JVM twin of
 * {@code engine.spark.logfiles} over {@code engine.applog.LogReader} (the store's own
 * lock-free reader decides visibility there; this class applies the same rules).
 *
 * <ul>
 * <li>a sealed segment (a newer one follows) must hold exactly {@code next base - base}
 * records: entry and checksum counts, its first and last entries agreeing with their
 * records and checksums, the log ending with the last record;</li>
 * <li>the newest segment shows the entries up to the last one that agrees with its record
 * and checksum (a torn tail is hidden, never reported as corruption);</li>
 * <li>records below {@code log-start-index} are not shown.</li>
 * </ul>
 */
public final class LogSegments {
    private LogSegments() {
    }

    public static final Pattern SEGMENT_RE = Pattern.compile("^(\\d{20})\\.log$");
    public static final String MANIFEST = "_SHARDS.json";
    public static final String START_FILE = "log-start-index";
    public static final int MAX_TAIL_STEPS = 4096;
    public static final int MAX_DEPTH = 6;

    /** One visible segment (logfiles.Segment). */
    public static final class Segment implements Serializable {
        private static final long serialVersionUID = 1L;
        public final String logPath;
        public final String idxPath;
        public final String crcPath;
        public final boolean hasCrc;
        public final long firstIndex;
        public final long count;
        public final long endOffset;
        public final Long firstTime;
        public final Long lastTime;
        public final long minPos;
        /**
         * The newest segment's index as the writer's next open repairs it (header, the
         * entries that were right, the entries rebuilt from the log), held in memory and
         * read instead of the file; null: the file is the index (see {@link #newest}).
         */
        public final byte[] memIdx;

        Segment(String logPath, boolean hasCrc, long firstIndex, long count, long endOffset, Long firstTime,
                Long lastTime, long minPos) {
            this(logPath, hasCrc, firstIndex, count, endOffset, firstTime, lastTime, minPos, null);
        }

        Segment(String logPath, boolean hasCrc, long firstIndex, long count, long endOffset, Long firstTime,
                Long lastTime, long minPos, byte[] memIdx) {
            this.logPath = logPath;
            String stem = logPath.substring(0, logPath.length() - 4);
            this.idxPath = stem + ".idx";
            this.crcPath = stem + ".crc";
            this.hasCrc = hasCrc;
            this.firstIndex = firstIndex;
            this.count = count;
            this.endOffset = endOffset;
            this.firstTime = firstTime;
            this.lastTime = lastTime;
            this.minPos = minPos;
            this.memIdx = memIdx;
        }

        /** Up to {@code n} bytes of the index at {@code offset}: the rebuilt one in memory, else the file. */
        public byte[] readIdx(Hfs fs, long offset, int n) {
            if (memIdx == null) {
                return fs.readAt(idxPath, offset, n);
            }
            int from = (int) Math.min(offset, memIdx.length);
            return java.util.Arrays.copyOfRange(memIdx, from, (int) Math.min((long) from + n, memIdx.length));
        }

        public long stopIndex() {
            return firstIndex + count;
        }

        public long visible() {
            return count - minPos;
        }
    }

    /** One log of a dataset: its display name (the {@code log} column) and directory. */
    public static final class LogDir implements Serializable {
        private static final long serialVersionUID = 1L;
        public final String name;
        public final String path;

        LogDir(String name, String path) {
            this.name = name;
            this.path = path;
        }
    }

    /** One log's visible records (logplan.LogSpan). */
    public static final class Span implements Serializable {
        private static final long serialVersionUID = 1L;
        public final LogDir log;
        public final List<Segment> segments;

        Span(LogDir log, List<Segment> segments) {
            this.log = log;
            this.segments = segments;
        }

        public long next() {
            return segments.isEmpty() ? 0 : segments.get(segments.size() - 1).stopIndex();
        }

        public long first() {
            for (Segment s : segments) {
                if (s.visible() > 0) {
                    return s.firstIndex + s.minPos;
                }
            }
            return next();
        }

        /** The first index whose record time is >= tNs ({@code next} if none). */
        public long indexAtTime(Hfs fs, long tNs) {
            for (Segment seg : segments) {
                if (seg.visible() == 0 || seg.lastTime == null || seg.lastTime < tNs) {
                    continue;
                }
                return seg.firstIndex + positionsFor(fs, seg, null, null, tNs, null)[0];
            }
            return next();
        }
    }

    private static boolean isSegmentDir(Hfs fs, List<String> names) {
        for (String n : names) {
            if (SEGMENT_RE.matcher(n).matches()) {
                return true;
            }
        }
        return false;
    }

    /** The shard names of a sink manifest, or null when {@code dir} has none. */
    static List<String> readManifest(Hfs fs, String dir) {
        String mpath = Hfs.join(dir, MANIFEST);
        if (!fs.exists(mpath)) {
            return null;
        }
        byte[] raw = fs.readAll(mpath);
        List<String> out = new ArrayList<>();
        String problem = null;
        try {
            JsonNode doc = new ObjectMapper().readTree(new String(raw, StandardCharsets.UTF_8));
            if (doc == null || !doc.isObject()) {
                problem = "not a JSON object";
            } else if (!doc.has("shards")) {
                problem = "'shards'";
            } else if (!doc.get("shards").isArray()) {
                problem = "shards is not a list of names";
            } else {
                for (JsonNode s : doc.get("shards")) {
                    if (!s.isTextual()) {
                        problem = "shards is not a list of names";
                        break;
                    }
                    out.add(s.asText());
                }
            }
        } catch (java.io.IOException e) {
            problem = e.getMessage();
        }
        if (problem != null) {
            throw new CorruptFileException(mpath, 0, "a JSON manifest with a list of shards", problem);
        }
        return out;
    }

    /** logfiles.dataset_logs: the logs making up the dataset at {@code path}. */
    public static List<LogDir> datasetLogs(Hfs fs, String path) {
        if (!fs.isDir(path)) {
            throw new ConfigException(path + ": no append log here (not a directory)");
        }
        List<LogDir> found = new ArrayList<>();
        List<String> staging = new ArrayList<>();
        walk(fs, path, "", 0, found, staging);
        if (found.isEmpty() && staging.isEmpty()) {
            for (String n : fs.list(path)) {
                if (!n.startsWith("_") && !n.startsWith(".")) {
                    throw new ConfigException(path + ": no append log here (no <index>.log segment or " + MANIFEST
                        + ", here or in a directory below)");
                }
            }
        }
        return found;
    }

    private static void walk(Hfs fs, String dir, String rel, int depth, List<LogDir> found, List<String> staging) {
        List<String> shards = readManifest(fs, dir);
        if (shards != null) {
            for (String name : shards) {
                found.add(new LogDir(rel.isEmpty() ? name : rel + "/" + name, Hfs.join(dir, name)));
            }
            return;
        }
        List<String> names = new ArrayList<>(fs.list(dir));
        Collections.sort(names);
        if (isSegmentDir(fs, names)) {
            String trimmed = dir.replaceAll("/+$", "");
            found.add(new LogDir(rel.isEmpty() ? trimmed.substring(trimmed.lastIndexOf('/') + 1) : rel, dir));
            return;
        }
        List<String> visible = new ArrayList<>();
        for (String n : names) {
            if (!n.startsWith("_") && !n.startsWith(".")) {
                visible.add(n);
            }
        }
        boolean allJobs = !visible.isEmpty();
        for (String n : visible) {
            allJobs &= n.startsWith("job-");
        }
        if (allJobs) {
            staging.add(dir);
            return;
        }
        if (depth >= MAX_DEPTH) {
            return;
        }
        for (String name : visible) {
            String full = Hfs.join(dir, name);
            if (fs.isDir(full)) {
                walk(fs, full, rel.isEmpty() ? name : rel + "/" + name, depth + 1, found, staging);
            }
        }
    }

    /** logfiles.logs_of: the logs of several paths, each named uniquely. */
    public static List<LogDir> logsOf(Hfs fs, List<String> paths) {
        List<LogDir> logs = new ArrayList<>();
        for (String p : paths) {
            for (LogDir ld : datasetLogs(fs, p)) {
                boolean seen = false;
                for (LogDir x : logs) {
                    seen |= x.path.equals(ld.path);
                }
                if (!seen) {
                    logs.add(ld);
                }
            }
        }
        java.util.Set<String> names = new java.util.HashSet<>();
        for (LogDir ld : logs) {
            names.add(ld.name);
        }
        if (names.size() == logs.size()) {
            return logs;
        }
        java.nio.file.Path common = null;
        for (String p : paths) {
            java.nio.file.Path q = java.nio.file.Paths.get(p.replaceAll("/+$", "").isEmpty() ? "/" : p.replaceAll("/+$", ""));
            if (common == null) {
                common = q;
            } else {
                while (!q.startsWith(common)) {
                    common = common.getParent();
                }
            }
        }
        java.nio.file.Path parent = common == null ? null : common.getParent();
        List<LogDir> out = new ArrayList<>();
        for (LogDir ld : logs) {
            out.add(new LogDir(parent == null ? ld.path : parent.relativize(java.nio.file.Paths.get(ld.path)).toString(),
                ld.path));
        }
        return out;
    }

    /** (time, end) of the record entry {@code position} names, if they agree (LogReader._entry_agrees). */
    private static long[] entryAgrees(Hfs fs, String stem, long base, boolean crc, long position, long logSize) {
        byte[] raw = fs.readAt(stem + ".idx", LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * position, LogCodec.ENTRY_SIZE);
        if (raw.length < LogCodec.ENTRY_SIZE) {
            return null;
        }
        long time = LogCodec.i64(raw, 0);
        long index = LogCodec.i64(raw, 8);
        long offset = LogCodec.i64(raw, 16);
        if (index != base + position || offset < LogCodec.HEADER_SIZE || offset > logSize - LogCodec.RECORD_HEADER_SIZE) {
            return null;
        }
        byte[] head = fs.readAt(stem + ".log", offset, LogCodec.RECORD_HEADER_SIZE);
        if (head.length < LogCodec.RECORD_HEADER_SIZE) {
            return null;
        }
        long size = LogCodec.u32(head, 0);
        long recTime = LogCodec.i64(head, 8);
        long end = offset + LogCodec.RECORD_HEADER_SIZE + size;
        if (recTime != time || end > logSize) {
            return null;
        }
        if (crc) {
            byte[] rawCrc = fs.readAt(stem + ".crc", LogCodec.HEADER_SIZE + LogCodec.CRC_SIZE * position, LogCodec.CRC_SIZE);
            if (rawCrc.length < LogCodec.CRC_SIZE) {
                return null;
            }
            byte[] rec = fs.readAt(stem + ".log", offset, (int) (LogCodec.RECORD_HEADER_SIZE + size));
            if (rec.length != LogCodec.RECORD_HEADER_SIZE + size
                || LogCodec.crc32(rec, 0, rec.length) != LogCodec.u32(rawCrc, 0)) {
                return null;
            }
        }
        return new long[] {time, end};
    }

    private static String segName(long base) {
        return String.format("%020d", base);
    }

    /** logfiles.list_segments: the visible segments of one log directory, oldest first. */
    public static List<Segment> listSegments(Hfs fs, String dir) {
        List<Long> bases = new ArrayList<>();
        for (String n : fs.list(dir)) {
            Matcher m = SEGMENT_RE.matcher(n);
            if (m.matches()) {
                bases.add(Long.parseLong(m.group(1)));
            }
        }
        Collections.sort(bases);
        List<Segment> keep = new ArrayList<>();
        Long prevTime = null;
        for (int k = 0; k < bases.size(); k++) {
            long base = bases.get(k);
            String stem = Hfs.join(dir, segName(base));
            String logPath = stem + ".log";
            byte[] head = fs.readAt(logPath, 0, LogCodec.HEADER_SIZE);
            if (head.length == LogCodec.HEADER_SIZE) {
                LogCodec.checkHeader(head, "LOG", logPath);
            } else if (head.length > 0
                && !new String(head, StandardCharsets.ISO_8859_1).startsWith("LOG".substring(0, Math.min(3, head.length)))) {
                throw new CorruptFileException(logPath, 0, "a LOG header", LogCodec.pyRepr(head, head.length), true);
            }
            boolean crc = fs.size(stem + ".crc") >= 0;
            Segment seg = k + 1 < bases.size()
                ? sealed(fs, stem, base, bases.get(k + 1), crc, prevTime, Hfs.join(dir, segName(bases.get(k + 1))) + ".log")
                : newest(fs, stem, base, crc, prevTime);
            keep.add(seg);
            if (seg.lastTime != null) {
                prevTime = seg.lastTime;
            }
        }
        String startPath = Hfs.join(dir, START_FILE);
        long start;
        if (fs.exists(startPath)) {
            byte[] raw = fs.readAll(startPath);
            String text = new String(raw, StandardCharsets.US_ASCII).strip();
            if (text.isEmpty() || !text.chars().allMatch(Character::isDigit)) {
                throw new CorruptFileException(startPath, 0, "a decimal record index",
                    LogCodec.pyRepr(raw, Math.min(32, raw.length)));
            }
            start = Long.parseLong(text);
        } else {
            start = keep.isEmpty() ? 0 : keep.get(0).firstIndex;
        }
        List<Segment> out = new ArrayList<>();
        for (Segment seg : keep) {
            if (seg.count == 0 || start <= seg.firstIndex) {
                out.add(seg);
            } else if (start < seg.stopIndex()) {
                long pos = start - seg.firstIndex;
                long t0 = entryAt(fs, seg, pos)[0];
                out.add(new Segment(seg.logPath, seg.hasCrc, seg.firstIndex, seg.count, seg.endOffset, t0, seg.lastTime,
                    pos, seg.memIdx));
            }
        }
        return out;
    }

    private static Segment sealed(Hfs fs, String stem, long base, long nextBase, boolean crc, Long prevTime,
                                  String nextLogPath) {
        long expected = nextBase - base;
        long idxSize = fs.size(stem + ".idx");
        if (idxSize < 0) {
            throw new CorruptFileException(stem + ".idx", 0, "a file of a sealed segment", "no file");
        }
        long logSize = fs.size(stem + ".log");
        if (idxSize >= LogCodec.HEADER_SIZE) {
            LogCodec.checkHeader(fs.readAt(stem + ".idx", 0, LogCodec.HEADER_SIZE), "IDX", stem + ".idx");
        }
        if (expected == 0 && idxSize == LogCodec.HEADER_SIZE && logSize == LogCodec.HEADER_SIZE) {
            return new Segment(stem + ".log", crc, base, 0, LogCodec.HEADER_SIZE, null, null, 0);
        }
        long[] first = null;
        long[] last = null;
        if (idxSize == LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * expected
            && (!crc || fs.size(stem + ".crc") == LogCodec.HEADER_SIZE + LogCodec.CRC_SIZE * expected) && expected > 0) {
            first = entryAgrees(fs, stem, base, crc, 0, logSize);
            last = entryAgrees(fs, stem, base, crc, expected - 1, logSize);
        }
        if (first == null || last == null || last[1] != logSize || first[0] > last[0]) {
            throw SealedCheck.fullCheck(fs, stem, base, expected, prevTime, nextLogPath, nextBase, crc);
        }
        return new Segment(stem + ".log", crc, base, expected, logSize, first[0], last[0], 0);
    }

    /**
     * The newest segment: the index entries up to the last one that agrees with its
     * record (and checksum).  Where the index and the log disagree (whole entries at the
     * end that do not agree, or whole records the log holds past the last entry) while no
     * writer holds the log's lock, the segment is shown as the writer's next open repairs
     * it, as LogReader._reconcile does: the writer's recovery walk
     * ({@link SealedCheck#scanSegment}, recovery.scan_segment) over the files in memory,
     * its rebuilt index kept in {@link Segment#memIdx} (nothing is written); damage that
     * is not a torn tail is CorruptFileException.  With a live writer they are its
     * records being written: not shown.
     */
    private static Segment newest(Hfs fs, String stem, long base, boolean crc, Long prevTime) {
        String idxPath = stem + ".idx";
        long idxSize = fs.size(idxPath);
        long count = 0;
        long shown = LogCodec.HEADER_SIZE;
        Long firstTime = null;
        Long lastTime = null;
        long logSize = fs.size(stem + ".log");
        if (idxSize >= 0) {
            if (idxSize >= LogCodec.HEADER_SIZE) {
                LogCodec.checkHeader(fs.readAt(idxPath, 0, LogCodec.HEADER_SIZE), "IDX", idxPath);
            }
            long n = idxSize <= LogCodec.HEADER_SIZE ? 0 : (idxSize - LogCodec.HEADER_SIZE) / LogCodec.ENTRY_SIZE;
            long position = n - 1;
            int steps = 0;
            while (position >= 0) {
                long[] found = entryAgrees(fs, stem, base, crc, position, logSize);
                if (found != null) {
                    count = position + 1;
                    shown = found[1];
                    lastTime = found[0];
                    long[] f = entryAgrees(fs, stem, base, crc, 0, logSize);
                    firstTime = f == null ? null : f[0];
                    break;
                }
                position -= 1;
                steps += 1;
                if (steps > MAX_TAIL_STEPS) {
                    throw new CorruptFileException(idxPath, LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * position,
                        "index entries that agree with the log", steps + " disagreeing entries at the end");
                }
            }
        }
        long entries = idxSize <= LogCodec.HEADER_SIZE ? 0 : (idxSize - LogCodec.HEADER_SIZE) / LogCodec.ENTRY_SIZE;
        boolean unindexed = false;
        if (logSize >= shown + LogCodec.RECORD_HEADER_SIZE) {
            byte[] head = fs.readAt(stem + ".log", shown, LogCodec.RECORD_HEADER_SIZE);
            if (head.length == LogCodec.RECORD_HEADER_SIZE) {
                long size = LogCodec.u32(head, 0);
                unindexed = size != 0 && shown + LogCodec.RECORD_HEADER_SIZE + size <= logSize;
            }
        }
        if ((count < entries || unindexed) && idxSize >= LogCodec.HEADER_SIZE
            && !WriterLock.held(fs, Hfs.join(stem.substring(0, stem.lastIndexOf('/')), WriterLock.LOCK_FILE))) {
            return reconcile(fs, stem, base, crc, prevTime);
        }
        // LogReader._check_unindexed: records in the log with no index to show them.
        if (unindexed && idxSize < LogCodec.HEADER_SIZE) {
            throw new CorruptFileException(idxPath, Math.max(idxSize, 0),
                "a 16-byte IDX header (the log " + stem + ".log holds records; the writer's next open rebuilds it)",
                idxSize < 0 ? "no file" : idxSize + " bytes (truncated file)");
        }
        return new Segment(stem + ".log", crc, base, count, shown, firstTime, lastTime, 0);
    }

    /** LogReader._reconcile: the newest segment as the writer's next open repairs it (see {@link #newest}). */
    private static Segment reconcile(Hfs fs, String stem, long base, boolean crc, Long prevTime) {
        byte[] log = fs.readAll(stem + ".log");
        byte[] idx = fs.readAll(stem + ".idx");
        byte[] crcBytes = crc ? fs.readAll(stem + ".crc") : null;
        LogCodec.checkHeader(idx, "IDX", stem + ".idx");
        if (crcBytes != null) {
            LogCodec.checkHeader(crcBytes, "CRC", stem + ".crc");
        }
        SealedCheck.Scan scan;
        try {
            scan = SealedCheck.scanSegment(log, idx, base, prevTime, crcBytes);
        } catch (SealedCheck.Mismatch m) {
            throw new CorruptFileException(stem + "." + m.where, m.offset, m.expected, m.found);
        }
        int keepEnd = (int) (LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * scan.idxKeep);
        byte[] rebuilt = scan.entries.toByteArray();
        byte[] mem = java.util.Arrays.copyOf(idx, keepEnd + rebuilt.length);
        System.arraycopy(rebuilt, 0, mem, keepEnd, rebuilt.length);
        return new Segment(stem + ".log", crc, base, scan.count, scan.logEnd, scan.firstTime, scan.lastTime, 0, mem);
    }

    static long[] entryAt(Hfs fs, Segment seg, long pos) {
        long off = LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * pos;
        byte[] raw = seg.readIdx(fs, off, LogCodec.ENTRY_SIZE);
        if (raw.length < LogCodec.ENTRY_SIZE) {
            throw new CorruptFileException(seg.idxPath, off, "a whole index entry", raw.length + " bytes");
        }
        return new long[] {LogCodec.i64(raw, 0), LogCodec.i64(raw, 8), LogCodec.i64(raw, 16)};
    }

    /** logfiles.position_at_time: the first position whose time is >= tNs (binary search over the IDX). */
    public static long positionAtTime(Hfs fs, Segment seg, long tNs) {
        long lo = 0;
        long hi = seg.count;
        while (lo < hi) {
            long mid = (lo + hi) >>> 1;
            if (entryAt(fs, seg, mid)[0] < tNs) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    /** logfiles.positions_for: positions [a, b) of {@code seg} inside the index and time ranges (hi exclusive). */
    public static long[] positionsFor(Hfs fs, Segment seg, Long indexLo, Long indexHi, Long timeLo, Long timeHi) {
        long a = seg.minPos;
        long b = seg.count;
        if (indexLo != null) {
            a = Math.max(a, indexLo - seg.firstIndex);
        }
        if (indexHi != null) {
            b = Math.min(b, indexHi - seg.firstIndex);
        }
        if (a >= b) {
            return new long[] {a, a};
        }
        if (timeLo != null || timeHi != null) {
            if (seg.firstTime == null || seg.lastTime == null) {
                return new long[] {a, a};
            }
            if (timeLo != null && timeLo > seg.lastTime) {
                return new long[] {b, b};
            }
            if (timeHi != null && timeHi <= seg.firstTime) {
                return new long[] {a, a};
            }
            if (timeLo != null && timeLo > seg.firstTime) {
                a = Math.max(a, positionAtTime(fs, seg, timeLo));
            }
            if (timeHi != null && timeHi <= seg.lastTime) {
                b = Math.min(b, positionAtTime(fs, seg, timeHi));
            }
        }
        return new long[] {a, Math.max(a, b)};
    }

    public static List<Span> spans(Hfs fs, List<LogDir> logs) {
        List<Span> out = new ArrayList<>();
        for (LogDir ld : logs) {
            out.add(new Span(ld, listSegments(fs, ld.path)));
        }
        return out;
    }
}
