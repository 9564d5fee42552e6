package engine.spark;

import java.nio.charset.StandardCharsets;

/**
 * The journald version 2 stream journal's layout in the JVM: the twin of
 * {@code engine.streams.codec} (page 0's header, record fields, check codes).  Integers are
 * 4 bytes MSB first; check codes are CRC-64/GO-ISO stored as 8 little-endian bytes.  The walk
 * over a journal's records is {@link StreamScanner}'s.
 */
public final class StreamCodec {
    static final byte[] MAGIC = "journald".getBytes(StandardCharsets.US_ASCII);
    static final int VERSION = 2;
    static final int HEADER_BODY = 24;
    static final int CHECK_SIZE = 8;
    static final int FILE_HEADER_SIZE = HEADER_BODY + CHECK_SIZE;
    static final int HEAD_SIZE = FILE_HEADER_SIZE + 16;
    static final int RECORD_HEADER_SIZE = 20;
    static final int RECORD_OVERHEAD = RECORD_HEADER_SIZE + CHECK_SIZE;
    static final int MIN_PAGE_SIZE = 64;
    static final int INFO = 1;
    static final int DATA = 2;
    static final int EOS = 4;
    static final int ABORT = 8;
    static final long U32 = 0xFFFFFFFFL;

    private StreamCodec() {
    }

    private static final long POLY = 0xD800000000000000L;
    /** Slicing-by-8 tables: {@code T[k][i]} is byte {@code i} followed by {@code k} zero bytes. */
    private static final long[][] T = new long[8][256];
    private static final java.lang.invoke.VarHandle LE64 =
        java.lang.invoke.MethodHandles.byteArrayViewVarHandle(long[].class, java.nio.ByteOrder.LITTLE_ENDIAN);

    static {
        for (int i = 0; i < 256; i++) {
            long c = i;
            for (int k = 0; k < 8; k++) {
                c = (c >>> 1) ^ ((c & 1L) != 0 ? POLY : 0L);
            }
            T[0][i] = c;
        }
        for (int k = 1; k < 8; k++) {
            for (int i = 0; i < 256; i++) {
                T[k][i] = (T[k - 1][i] >>> 8) ^ T[0][(int) (T[k - 1][i] & 0xFF)];
            }
        }
    }

    /** CRC-64/GO-ISO (reflected 0xD800000000000000, init all ones, final complement). */
    static long crc64(byte[] b, int off, int len) {
        return ~crc64Update(-1L, b, off, len);
    }

    /**
     * The CRC-64 register after {@code b[off, off + len)}, from {@code crc} ({@code -1L} at the
     * start; the check code is its complement): a record larger than the read window is checked
     * window by window.
     */
    static long crc64Update(long crc, byte[] b, int off, int len) {
        long[] t0 = T[0];
        int i = off;
        int end = off + len;
        for (; end - i >= 8; i += 8) {
            long c = crc ^ (long) LE64.get(b, i);
            crc = T[7][(int) c & 0xFF] ^ T[6][(int) (c >>> 8) & 0xFF] ^ T[5][(int) (c >>> 16) & 0xFF]
                ^ T[4][(int) (c >>> 24) & 0xFF] ^ T[3][(int) (c >>> 32) & 0xFF] ^ T[2][(int) (c >>> 40) & 0xFF]
                ^ T[1][(int) (c >>> 48) & 0xFF] ^ t0[(int) (c >>> 56)];
        }
        for (; i < end; i++) {
            crc = (crc >>> 8) ^ t0[(int) (crc ^ b[i]) & 0xFF];
        }
        return crc;
    }

    static long u32(byte[] b, int off) {
        return ((b[off] & 0xFFL) << 24) | ((b[off + 1] & 0xFFL) << 16) | ((b[off + 2] & 0xFFL) << 8) | (b[off + 3] & 0xFFL);
    }

    static long le64(byte[] b, int off) {
        long v = 0;
        for (int i = 7; i >= 0; i--) {
            v = (v << 8) | (b[off + i] & 0xFFL);
        }
        return v;
    }

    static String hex(byte[] b, int off, int len, String sep) {
        StringBuilder s = new StringBuilder();
        for (int i = off; i < off + len; i++) {
            if (i > off) {
                s.append(sep);
            }
            s.append(String.format("%02x", b[i] & 0xFF));
        }
        return s.toString();
    }

    /** Python's {@code repr(bytes)}. */
    static String pyRepr(byte[] b, int off, int len) {
        boolean sq = false;
        boolean dq = false;
        for (int i = off; i < off + len; i++) {
            sq |= b[i] == '\'';
            dq |= b[i] == '"';
        }
        char q = sq && !dq ? '"' : '\'';
        StringBuilder s = new StringBuilder("b").append(q);
        for (int i = off; i < off + len; i++) {
            int c = b[i] & 0xFF;
            if (c == q || c == '\\') {
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
        return s.append(q).toString();
    }

    /** One whole stream, as {@code StreamData}; {@code ident} and {@code data} are null when not read. */
    public static final class Stream {
        public final long number;
        public final byte[] ident;
        public final long startOffset;
        public final String status;
        public final byte[] data;
        /** The data's length (known whether or not the data was kept). */
        public final long length;
        public final long position;

        Stream(long number, byte[] ident, long startOffset, String status, byte[] data, long length, long position) {
            this.number = number;
            this.ident = ident;
            this.startOffset = startOffset;
            this.status = status;
            this.data = data;
            this.length = length;
            this.position = position;
        }
    }

    /**
     * Decode and check page 0's header ({@code f}: the file's first {@link #HEAD_SIZE} bytes, fewer
     * when it is shorter); returns the page size (as codec.decode_file_header).
     */
    static long pageSize(byte[] f, String path) {
        int n = Math.min(f.length, HEAD_SIZE);
        if (n < FILE_HEADER_SIZE) {
            boolean prefix = true;
            for (int i = 0; i < Math.min(n, MAGIC.length); i++) {
                prefix &= f[i] == MAGIC[i];
            }
            if (!prefix) {
                String found = n == 0 ? "empty file" : hex(f, 0, Math.min(n, 8), " ");
                throw new CorruptFileException(path, 0, "journald signature", found, true);
            }
            throw new CorruptFileException(path, n, "a " + FILE_HEADER_SIZE + "-byte journald header", n + " bytes");
        }
        for (int i = 0; i < MAGIC.length; i++) {
            if (f[i] != MAGIC[i]) {
                throw new CorruptFileException(path, 0, "journald signature", pyRepr(f, 0, 8), true);
            }
        }
        long version = u32(f, 8);
        if (version != VERSION) {
            throw new CorruptFileException(path, 8, "journald version " + VERSION, "version " + version, true);
        }
        long stored = le64(f, HEADER_BODY);
        long computed = crc64(f, 0, HEADER_BODY);
        if (stored != computed) {
            byte[] c = new byte[8];
            for (int i = 0; i < 8; i++) {
                c[i] = (byte) (computed >>> (8 * i));
            }
            throw new CorruptFileException(path, HEADER_BODY, "header check code " + hex(c, 0, 8, ""),
                hex(f, HEADER_BODY, 8, ""));
        }
        long page = u32(f, 12);
        if (page == 0) {
            throw new CorruptFileException(path, 12, "a non-zero page size", "0", true);
        }
        if (page < MIN_PAGE_SIZE) {
            throw new CorruptFileException(path, 12, "a page size of at least " + MIN_PAGE_SIZE, Long.toString(page), true);
        }
        long options = u32(f, 20);
        if (options != 0) {
            throw new CorruptFileException(path, 20, "option length 0 (options are not supported)",
                Long.toString(options), true);
        }
        return page;
    }

    static boolean marked(byte[] f) {
        for (int i = FILE_HEADER_SIZE; i < Math.min(f.length, HEAD_SIZE); i++) {
            if (f[i] != 0) {
                return true;
            }
        }
        return false;
    }

    static boolean isAhead(long g, long expected) {
        return ((g - expected) & U32) < (1L << 31);
    }
}
