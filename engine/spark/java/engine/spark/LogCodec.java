package engine.spark;

import java.util.zip.CRC32;

/**
 * Bytes in, columns out: the LOG/IDX/CRC layouts of {@code docs/formats/applog.md}, the JVM
 * twin of {@code engine.applog.codec} and {@code engine.spark.logcodec}.
 *
 * <p>Every check runs in the same order over the same run of records as the Python decoder
 * ({@code decode_run}, {@code decode_index_run}), so both report the same first problem
 * with the same file, offset and words (tests/spark/test_spark_jvm_parity.py).
 */
public final class LogCodec {
    private LogCodec() {
    }

    /** File header: 3-byte signature, u8 version, u32 flags, i64 TTL (ns). */
    public static final int HEADER_SIZE = 16;
    /** Record header: u32 size, u32 flags, i64 time (ns). */
    public static final int RECORD_HEADER_SIZE = 16;
    /** Index entry: i64 time, u64 index, i64 offset of the record in the .log. */
    public static final int ENTRY_SIZE = 24;
    /** .crc entry: u32 CRC-32 of the record's header and data. */
    public static final int CRC_SIZE = 4;
    public static final int VERSION = 1;
    public static final int MAX_BATCH_BYTES = Integer.MAX_VALUE;

    public static long i64(byte[] b, int off) {
        return (b[off] & 0xFFL) | (b[off + 1] & 0xFFL) << 8 | (b[off + 2] & 0xFFL) << 16 | (b[off + 3] & 0xFFL) << 24
            | (b[off + 4] & 0xFFL) << 32 | (b[off + 5] & 0xFFL) << 40 | (b[off + 6] & 0xFFL) << 48
            | (b[off + 7] & 0xFFL) << 56;
    }

    public static long u32(byte[] b, int off) {
        return (b[off] & 0xFFL) | (b[off + 1] & 0xFFL) << 8 | (b[off + 2] & 0xFFL) << 16 | (b[off + 3] & 0xFFL) << 24;
    }

    /** Python's {@code repr(bytes)}: b'...' with the same escapes. */
    public static String pyRepr(byte[] b, int len) {
        boolean single = false;
        boolean dbl = false;
        for (int i = 0; i < len; i++) {
            single |= b[i] == '\'';
            dbl |= b[i] == '"';
        }
        char quote = single && !dbl ? '"' : '\'';
        StringBuilder s = new StringBuilder("b").append(quote);
        for (int i = 0; i < len; i++) {
            int c = b[i] & 0xFF;
            if (c == quote || c == '\\') {
                s.append('\\').append((char) c);
            } else if (c == '\t') {
                s.append("\\t");
            } else if (c == '\n') {
                s.append("\\n");
            } else if (c == '\r') {
                s.append("\\r");
            } else if (c < 32 || c >= 127) {
                s.append(String.format("\\x%02x", c));
            } else {
                s.append((char) c);
            }
        }
        return s.append(quote).toString();
    }

    /**
     * {@code engine.applog.codec.check_header}: the TTL of a valid header; a short header is
     * a CorruptFileError where the file ends, a foreign signature (offset 0) or version
     * (offset 3) a FormatError.
     */
    public static long checkHeader(byte[] data, String magic, String path) {
        if (data.length < HEADER_SIZE) {
            throw new CorruptFileException(path, data.length, "a " + HEADER_SIZE + "-byte " + magic + " header",
                data.length + " bytes (truncated file)");
        }
        for (int i = 0; i < 3; i++) {
            if (data[i] != magic.charAt(i)) {
                throw new CorruptFileException(path, 0, "signature " + magic, pyRepr(data, 3), true);
            }
        }
        int version = data[3] & 0xFF;
        if (version != VERSION) {
            throw new CorruptFileException(path, 3, "version " + VERSION, Integer.toString(version), true);
        }
        return i64(data, 8);
    }

    /** CRC-32 (zlib's) of {@code len} bytes of {@code b} from {@code off}. */
    public static long crc32(byte[] b, int off, int len) {
        CRC32 c = new CRC32();
        c.update(b, off, len);
        return c.getValue();
    }

    /** A run of consecutive records decoded into columns. */
    public static final class Run {
        public int n;
        public long firstIndex;
        public long[] time;
        public long[] flags;
        /** Offsets of each record's header in {@code buf}; payloads follow at +16. */
        public int[] at;
        public int[] size;
        public byte[] buf;
        /** Absolute .log offset of {@code buf[0]}. */
        public long base;
        /** Positions failing their checksum (ascending), or empty. */
        public int[] bad = new int[0];
        /** The index-only run's last entry's log offset (the next run starts above it). */
        public long lastOffset;
    }

    private static String idxPathOf(String path) {
        return path.endsWith(".log") ? path.substring(0, path.length() - 4) + ".idx" : path;
    }

    /**
     * {@code engine.spark.logcodec.decode_run}: the {@code n} records the entries in
     * {@code idx} (from byte 0, {@code n} entries) name, from {@code log} (the .log from
     * absolute offset {@code base}, {@code logLen} bytes valid), each checked against its
     * entry and, when {@code crcs} is given ({@code n} u32s), its CRC-32.
     */
    public static Run decodeRun(byte[] log, int logLen, long base, byte[] idx, int n, String path, long firstIndex,
                                long idxBase, byte[] crcs) {
        Run run = new Run();
        run.n = n;
        run.firstIndex = firstIndex;
        run.base = base;
        run.buf = log;
        run.time = new long[n];
        run.flags = new long[n];
        run.at = new int[n];
        run.size = new int[n];
        if (n == 0) {
            return run;
        }
        String idxPath = idxPathOf(path);
        for (int i = 0; i < n; i++) {
            long index = i64(idx, ENTRY_SIZE * i + 8);
            if (index != firstIndex + i) {
                throw new CorruptFileException(idxPath, idxBase + (long) ENTRY_SIZE * i + 8,
                    "index entry for record " + (firstIndex + i), "index " + Long.toUnsignedString(index));
            }
        }
        long[] offsets = new long[n];
        for (int i = 0; i < n; i++) {
            offsets[i] = i64(idx, ENTRY_SIZE * i + 16) - base;
        }
        int badOffset = offsets[0] != 0 ? 0 : -1;
        for (int i = 1; i < n && badOffset < 0; i++) {
            if (offsets[i] <= offsets[i - 1]) {
                badOffset = i;
            }
        }
        if (badOffset >= 0) {
            int i = badOffset;
            throw new CorruptFileException(idxPath, idxBase + (long) ENTRY_SIZE * i + 16,
                "back-to-back log offsets at record " + (firstIndex + i), "offset " + (offsets[i] + base));
        }
        if (offsets[n - 1] + RECORD_HEADER_SIZE > logLen) {
            throw new CorruptFileException(path, base + offsets[n - 1], "a whole record header", "end of file");
        }
        long[] sizes = new long[n];
        for (int i = 0; i < n; i++) {
            int o = (int) offsets[i];
            sizes[i] = u32(log, o);
            run.flags[i] = u32(log, o + 4);
            run.time[i] = i64(log, o + 8);
            run.at[i] = o;
        }
        for (int i = 0; i + 1 < n; i++) {
            if (offsets[i] + RECORD_HEADER_SIZE + sizes[i] != offsets[i + 1]) {
                throw new CorruptFileException(path, base + offsets[i],
                    "a record of " + (offsets[i + 1] - offsets[i] - RECORD_HEADER_SIZE) + " bytes (the index's spacing)",
                    "size " + sizes[i]);
            }
        }
        long lastEnd = offsets[n - 1] + RECORD_HEADER_SIZE + sizes[n - 1];
        if (lastEnd > logLen) {
            throw new CorruptFileException(path, base + offsets[n - 1], "a whole record",
                (logLen - offsets[n - 1]) + " bytes before the end");
        }
        for (int i = 0; i < n; i++) {
            long entryTime = i64(idx, ENTRY_SIZE * i);
            if (run.time[i] != entryTime) {
                throw new CorruptFileException(path, base + offsets[i] + 8, "time " + entryTime + " (from the index)",
                    Long.toString(run.time[i]));
            }
        }
        for (int i = 0; i < n; i++) {
            run.size[i] = (int) sizes[i];
        }
        if (crcs != null) {
            int[] bad = new int[4];
            int nbad = 0;
            CRC32 c = new CRC32();
            for (int i = 0; i < n; i++) {
                c.reset();
                c.update(log, run.at[i], RECORD_HEADER_SIZE + run.size[i]);
                if (c.getValue() != u32(crcs, CRC_SIZE * i)) {
                    if (nbad == bad.length) {
                        bad = java.util.Arrays.copyOf(bad, 2 * nbad);
                    }
                    bad[nbad++] = i;
                }
            }
            run.bad = java.util.Arrays.copyOf(bad, nbad);
        }
        return run;
    }

    /**
     * {@code engine.spark.logcodec.decode_index_run}: the index and time columns of
     * {@code n} entries (from byte 0 of {@code idx}), from the IDX alone.
     */
    public static Run decodeIndexRun(byte[] idx, int n, String idxPath, long firstIndex, long idxBase, long logEnd,
                                     Long prevOffset, Long prevTime) {
        Run run = new Run();
        run.n = n;
        run.firstIndex = firstIndex;
        run.time = new long[n];
        if (n == 0) {
            run.lastOffset = prevOffset == null ? -1 : prevOffset;
            return run;
        }
        for (int i = 0; i < n; i++) {
            long index = i64(idx, ENTRY_SIZE * i + 8);
            if (index != firstIndex + i) {
                throw new CorruptFileException(idxPath, idxBase + (long) ENTRY_SIZE * i + 8,
                    "index entry for record " + (firstIndex + i), "index " + Long.toUnsignedString(index));
            }
        }
        long lowest = prevOffset == null ? HEADER_SIZE : prevOffset + RECORD_HEADER_SIZE;
        long first = i64(idx, 16);
        long last = i64(idx, ENTRY_SIZE * (n - 1) + 16);
        int wrong = -1;
        for (int i = 1; i < n && wrong < 0; i++) {
            if (i64(idx, ENTRY_SIZE * i + 16) - i64(idx, ENTRY_SIZE * (i - 1) + 16) < RECORD_HEADER_SIZE) {
                wrong = i;
            }
        }
        if (first < lowest || wrong >= 0 || last > logEnd - RECORD_HEADER_SIZE) {
            int i;
            String want;
            if (first < lowest) {
                i = 0;
                want = "a log offset >= " + lowest;
            } else if (wrong >= 0) {
                i = wrong;
                want = "a log offset >= " + (i64(idx, ENTRY_SIZE * (i - 1) + 16) + RECORD_HEADER_SIZE)
                    + " (a record header past the last)";
            } else {
                i = n - 1;
                want = "a log offset <= " + (logEnd - RECORD_HEADER_SIZE) + " (a record inside the visible log)";
            }
            throw new CorruptFileException(idxPath, idxBase + (long) ENTRY_SIZE * i + 16, want,
                "offset " + i64(idx, ENTRY_SIZE * i + 16));
        }
        for (int i = 0; i < n; i++) {
            run.time[i] = i64(idx, ENTRY_SIZE * i);
        }
        int back = -1;
        if (prevTime != null && run.time[0] < prevTime) {
            back = 0;
        }
        for (int i = 1; i < n && back < 0; i++) {
            if (run.time[i] < run.time[i - 1]) {
                back = i;
            }
        }
        if (back >= 0) {
            long before = back == 0 ? prevTime : run.time[back - 1];
            throw new CorruptFileException(idxPath, idxBase + (long) ENTRY_SIZE * back,
                "a time >= " + before + " (times never go back)", Long.toString(run.time[back]));
        }
        run.lastOffset = last;
        return run;
    }
}
