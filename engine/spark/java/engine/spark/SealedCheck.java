package engine.spark;

import java.util.zip.CRC32;

/**
 * Why a sealed segment failed the cheap check, pinpointed: the JVM twin of
 * {@code engine.applog.recovery.scan_segment}/{@code scan_sealed} and
 * {@code LogReader._full_check} (whole files in memory, the log the truth, the index
 * derived data), raising the same {@code CorruptFileError} with the same file, offset and
 * words.  {@link #scanSegment} is also the newest segment's reconciliation
 * ({@code LogSegments.newest}, LogReader._reconcile): its {@code Scan} carries the rebuilt
 * index entries and the first and last times for that.
 */
final class SealedCheck {
    private SealedCheck() {
    }

    private static final int H = LogCodec.HEADER_SIZE;
    private static final int R = LogCodec.RECORD_HEADER_SIZE;
    private static final int E = LogCodec.ENTRY_SIZE;
    private static final int C = LogCodec.CRC_SIZE;

    /** A record header inside the buffer: offset, size, flags, time. */
    private static final class Rec {
        final long offset;
        final long size;
        final long flags;
        final long time;

        Rec(long offset, long size, long flags, long time) {
            this.offset = offset;
            this.size = size;
            this.flags = flags;
            this.time = time;
        }

        long end() {
            return offset + R + size;
        }

        boolean zero() {
            return size == 0 && flags == 0 && time == 0;
        }
    }

    /** A mismatch in the middle: the file ("log", "idx", "crc"), offset and words. */
    static final class Mismatch extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final String where;
        final long offset;
        final String expected;
        final String found;

        Mismatch(String where, long offset, String expected, String found) {
            super(where + " at " + offset);
            this.where = where;
            this.offset = offset;
            this.expected = expected;
            this.found = found;
        }
    }

    private static Rec parse(byte[] log, long offset) {
        if (offset < 0 || offset + R > log.length) {
            return null;
        }
        int o = (int) offset;
        long size = LogCodec.u32(log, o);
        if (offset + R + size > log.length) {
            return null;
        }
        return new Rec(offset, size, LogCodec.u32(log, o + 4), LogCodec.i64(log, o + 8));
    }

    private static boolean crcMatches(byte[] log, Rec rec, byte[] crc, long position) {
        long at = H + C * position;
        if (at + C > crc.length) {
            return false;
        }
        CRC32 c = new CRC32();
        c.update(log, (int) rec.offset, (int) (rec.end() - rec.offset));
        return c.getValue() == LogCodec.u32(crc, (int) at);
    }

    private static long entryCount(int idxSize) {
        return idxSize <= H ? 0 : (idxSize - H) / E;
    }

    private static boolean agrees(byte[] log, byte[] idx, long base, long position, byte[] crc) {
        int e = (int) (H + E * position);
        long time = LogCodec.i64(idx, e);
        long index = LogCodec.i64(idx, e + 8);
        long offset = LogCodec.i64(idx, e + 16);
        if (index != base + position || offset < H) {
            return false;
        }
        Rec rec = parse(log, offset);
        if (rec == null || rec.zero()) {
            return false;
        }
        if (crc != null && !crcMatches(log, rec, crc, position)) {
            return false;
        }
        return rec.time == time;
    }

    private static boolean validFollows(byte[] log, byte[] idx, byte[] crc, long base, long k, Rec rec) {
        if (rec != null) {
            Rec nxt = parse(log, rec.end());
            if (nxt != null && !nxt.zero() && crcMatches(log, nxt, crc, k + 1)) {
                return true;
            }
        }
        long n = entryCount(idx.length);
        for (long j : new long[] {k + 1, n - 1}) {
            if (k < j && j < n && agrees(log, idx, base, j, crc)) {
                return true;
            }
        }
        return false;
    }

    /** What scan_segment returns that the sealed check uses. */
    static final class Scan {
        long count;
        long logEnd;
        long idxKeep;
        long rebuilt;
        long logCut;
        long idxDropped;
        long idxPartial;
        long crcDropped;
        Long firstTime;
        Long lastTime;
        /** The rebuilt entries (time, index, offset each), {@code rebuilt} of them. */
        java.io.ByteArrayOutputStream entries = new java.io.ByteArrayOutputStream();

        boolean clean() {
            return rebuilt == 0 && logCut == 0 && idxDropped == 0 && idxPartial == 0 && crcDropped == 0;
        }
    }

    static Scan scanSegment(byte[] log, byte[] idx, long base, Long minTime, byte[] crc) {
        long nIdx = entryCount(idx.length);
        long idxPartial = idx.length > H ? (idx.length - H) % E : 0;
        long pos = H;
        long k = 0;
        Long last = minTime;
        Long keep = null;
        long rebuilt = 0;
        Long first = null;
        java.io.ByteArrayOutputStream entries = new java.io.ByteArrayOutputStream();
        Rec prev = null;
        while (true) {
            Rec rec = parse(log, pos);
            if (crc != null && (rec == null || rec.zero() || !crcMatches(log, rec, crc, k))) {
                if (rec != null && validFollows(log, idx, crc, base, k, rec)) {
                    throw new Mismatch("log", pos, "record " + (base + k) + " matching its checksum (.crc entry " + k + ")",
                        "a record of " + rec.size + " bytes at time " + rec.time + " that does not, followed by valid records");
                }
                if (rec == null && validFollows(log, idx, crc, base, k, null)) {
                    throw new Mismatch("log", pos, "record " + (base + k), "the log is torn here but later records verify");
                }
                break;
            }
            if (keep == null && k < nIdx) {
                int e = (int) (H + E * k);
                long t = LogCodec.i64(idx, e);
                long i = LogCodec.i64(idx, e + 8);
                long off = LogCodec.i64(idx, e + 16);
                boolean ok = rec != null && i == base + k && off == pos && t == rec.time && (last == null || t >= last);
                if (ok) {
                    prev = rec;
                    if (first == null) {
                        first = t;
                    }
                    last = t;
                    pos = rec.end();
                    k++;
                    continue;
                }
                boolean later = false;
                for (long j : new long[] {k + 1, nIdx - 1}) {
                    later |= k < j && j < nIdx && agrees(log, idx, base, j, crc);
                }
                if (later) {
                    Rec atOff = off != pos && prev != null && off > prev.offset ? parse(log, off) : null;
                    if (atOff != null && prev != null && atOff.time == t) {
                        throw new Mismatch("log", prev.offset, "record " + (base + k - 1) + " of " + (off - prev.offset - 16)
                            + " bytes (the next is indexed at " + off + ")", "size " + prev.size);
                    }
                    if (rec == null) {
                        throw new Mismatch("log", pos, "record " + (base + k) + " (indexed at offset " + off + ")",
                            "the log ends or is torn here");
                    }
                    throw new Mismatch("idx", H + E * k, "entry for record " + (base + k)
                        + " agreeing with the log record at offset " + pos + " (time " + rec.time + ", " + rec.size + " bytes)",
                        "time " + t + ", index " + Long.toUnsignedString(i) + ", offset " + off);
                }
                keep = k;
                continue;
            }
            if (rec == null || (rec.size == 0 && crc == null) || (last != null && rec.time < last)) {
                break;
            }
            rebuilt++;
            byte[] entry = new byte[E];
            java.nio.ByteBuffer.wrap(entry).order(java.nio.ByteOrder.LITTLE_ENDIAN).putLong(rec.time).putLong(base + k)
                .putLong(pos);
            entries.write(entry, 0, E);
            if (first == null) {
                first = rec.time;
            }
            last = rec.time;
            pos = rec.end();
            k++;
        }
        if (keep == null) {
            keep = Math.min(k, nIdx);
        }
        Scan s = new Scan();
        s.count = k;
        s.logEnd = pos;
        s.idxKeep = keep;
        s.rebuilt = rebuilt;
        s.logCut = log.length - pos;
        s.idxDropped = nIdx - keep;
        s.idxPartial = idxPartial;
        s.crcDropped = crc != null ? Math.max(0, crc.length - (H + C * k)) : 0;
        s.firstTime = first;
        s.lastTime = k > 0 ? last : null;
        s.entries = entries;
        return s;
    }

    private static long recordOffset(byte[] log, long position) {
        long pos = H;
        for (long n = 0; n < position; n++) {
            Rec rec = parse(log, pos);
            if (rec == null) {
                return log.length;
            }
            pos = rec.end();
        }
        return pos;
    }

    static Scan scanSealed(byte[] log, byte[] idx, long base, long expected, Long minTime, byte[] crc) {
        Scan scan = scanSegment(log, idx, base, minTime, crc);
        if (scan.count < expected && !scan.clean()) {
            long offset = scan.logEnd;
            String found;
            if (crc != null && offset < log.length) {
                found = "a record failing its checksum (.crc entry at offset " + (H + C * scan.count) + ")";
            } else if (offset < log.length) {
                found = "a record that does not continue the log";
            } else {
                found = "the end of the log";
            }
            throw new Mismatch("log", offset, "record " + (base + scan.count) + " of a sealed segment of " + expected
                + " records (the next segment starts at index " + (base + expected) + ")", found);
        }
        if (scan.count > expected) {
            throw new Mismatch("log", recordOffset(log, expected), "the end of a sealed segment of " + expected
                + " records (the next segment starts at index " + (base + expected) + ")",
                (scan.count - expected) + " more records");
        }
        if (scan.logCut != 0) {
            throw new Mismatch("log", scan.logEnd, "the end of a sealed segment's " + scan.count + " records",
                scan.logCut + " more bytes");
        }
        if (scan.crcDropped != 0) {
            throw new Mismatch("crc", H + C * scan.count, "the end of a sealed segment's " + scan.count + " checksums",
                scan.crcDropped + " more bytes");
        }
        return scan;
    }

    /** LogReader._full_check: raises the CorruptFileError naming the damage (always raises). */
    static RuntimeException fullCheck(Hfs fs, String stem, long base, long expected, Long prevTime, String nextLogPath,
                                      long nextBase, boolean hasCrc) {
        byte[] log = fs.readAll(stem + ".log");
        byte[] idx = fs.readAll(stem + ".idx");
        byte[] crc = hasCrc ? fs.readAll(stem + ".crc") : null;
        LogCodec.checkHeader(idx, "IDX", stem + ".idx");
        if (crc != null) {
            LogCodec.checkHeader(crc, "CRC", stem + ".crc");
        }
        Scan scan;
        try {
            scan = scanSealed(log, idx, base, expected, prevTime, crc);
        } catch (Mismatch m) {
            return new CorruptFileException(stem + "." + m.where, m.offset, m.expected, m.found);
        }
        if (scan.count < expected) {
            return new CorruptFileException(nextLogPath, 0, "a segment starting at index " + (base + scan.count)
                + " (after " + stem + ".log)", Long.toString(nextBase));
        }
        return new CorruptFileException(stem + ".idx", H + E * scan.idxKeep, expected
            + " index entries agreeing with the log (the writer's next open rebuilds them from it)",
            scan.idxDropped + " wrong, " + scan.rebuilt + " missing, a partial entry of " + scan.idxPartial + " bytes");
    }
}
