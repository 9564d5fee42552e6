package engine.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;

/**
 * The journald version 2 stream journal, decoded in the JVM: the twin of
 * {@code engine.streams.codec} and {@code engine.streams.reader.JournalScan} (whole
 * streams).  Integers are 4 bytes MSB first; check codes are CRC-64/GO-ISO stored as
 * 8 little-endian bytes and every one is verified.  The first record that fails its
 * check code or its global record number (or runs past the end) is the end of the
 * journal (a torn transaction: {@link Scan#clean} false and {@link Scan#reason}, as the
 * Python scan's {@code end}); a zero page at a transaction start is a clean end, probed
 * past for intact records numbered ahead when page 0 carries engine's mark (damage:
 * {@link CorruptFileException} with the file and offset, same words as Python).  Records
 * that pass their checks but make no sense for their stream are {@link Scan#anomalies}.
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

    /** CRC-64/GO-ISO (reflected 0xD800000000000000, init all ones, final complement). */
    static long crc64(byte[] b, int off, int len) {
        long crc = -1L;
        for (int i = off; i < off + len; i++) {
            crc ^= b[i] & 0xFFL;
            for (int k = 0; k < 8; k++) {
                crc = (crc >>> 1) ^ ((crc & 1L) != 0 ? 0xD800000000000000L : 0L);
            }
        }
        return ~crc;
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

    /** One whole stream, as {@code StreamData}. */
    public static final class Stream {
        public final long number;
        public final byte[] ident;
        public final long startOffset;
        public final String status;
        public final byte[] data;
        public final long position;

        Stream(long number, byte[] ident, long startOffset, String status, byte[] data, long position) {
            this.number = number;
            this.ident = ident;
            this.startOffset = startOffset;
            this.status = status;
            this.data = data;
            this.position = position;
        }
    }

    private static final class Open {
        final long number;
        final byte[] ident;
        final long start;
        long offset;
        long record;
        final long position;
        final java.io.ByteArrayOutputStream chunks = new java.io.ByteArrayOutputStream();

        Open(long number, byte[] ident, long start, long record, long position) {
            this.number = number;
            this.ident = ident;
            this.start = start;
            this.offset = start;
            this.record = record;
            this.position = position;
        }
    }

    /** What a scan found: streams in the Python order, where and why it stopped. */
    public static final class Scan {
        public final List<Stream> streams = new ArrayList<>();
        public final List<String> anomalies = new ArrayList<>();
        public long position;
        public boolean clean;
        public String reason;
        public long nextGlobal;
        public long records;
        final TreeMap<Long, Open> open = new TreeMap<>();

        void anomaly(String message, long position) {
            anomalies.add("offset " + position + ": " + message);
        }

        void finish(Open st, String status) {
            open.remove(st.number);
            streams.add(new Stream(st.number, st.ident, st.start, status, st.chunks.toByteArray(), st.position));
        }
    }

    /** Decode and check page 0's header; returns the page size (as codec.decode_file_header). */
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

    static boolean zeros(byte[] f, long from, long len) {
        for (long i = from; i < from + len; i++) {
            if (f[(int) i] != 0) {
                return false;
            }
        }
        return true;
    }

    static boolean checkOk(byte[] f, long pos, long length) {
        int end = (int) (pos + RECORD_HEADER_SIZE + length);
        return le64(f, end) == crc64(f, (int) pos, end - (int) pos);
    }

    static boolean isAhead(long g, long expected) {
        return ((g - expected) & U32) < (1L << 31);
    }

    /** Read the whole journal ({@code f} is the file's bytes) into streams. */
    public static Scan scan(byte[] f, String path) {
        long page = pageSize(f, path);
        boolean strict = marked(f);
        long size = f.length;
        long limit = size - size % page;
        if (limit < 2 * page) {
            throw new CorruptFileException(path, size, "at least 2 pages of " + page + " bytes", size + " bytes");
        }
        Scan s = new Scan();
        long pos = page;
        long expected = u32(f, 16);
        long records = 0;
        String stop = null;
        boolean clean = false;
        outer:
        while (true) {
            if (pos + 4 > limit) {
                stop = "end of file without the zero page that ends a journal";
                break;
            }
            if (u32(f, (int) pos) == 0) {
                if (pos + page > limit || !zeros(f, pos, page)) {
                    stop = "a zero type word not followed by a zero page";
                } else {
                    stop = "end of journal";
                    clean = true;
                    if (strict) {
                        checkRealEnd(f, path, pos, page, limit, expected);
                    }
                }
                break;
            }
            while (true) {
                if (pos + RECORD_OVERHEAD > limit) {
                    stop = "record header runs past the end of the file";
                    break outer;
                }
                int p = (int) pos;
                long type = u32(f, p);
                long global = u32(f, p + 4);
                long length = u32(f, p + 16);
                long total = RECORD_OVERHEAD + length;
                if (pos + total > limit) {
                    stop = "record length " + length + " runs past the end of the file";
                    break outer;
                }
                if (!checkOk(f, pos, length)) {
                    stop = "check code mismatch in record " + expected;
                    break outer;
                }
                if (global != expected) {
                    stop = "global record number " + global + ", expected " + expected;
                    break outer;
                }
                record(s, type, u32(f, p + 8), u32(f, p + 12), f, p + RECORD_HEADER_SIZE, (int) length, pos);
                records++;
                expected = (expected + 1) & U32;
                pos += total;
                long room = page - pos % page;
                if (room == page) {
                    continue outer;
                }
                if (pos + 4 > limit || u32(f, (int) pos) == 0) {
                    if (!zeros(f, pos, room)) {
                        stop = "non-zero bytes in the padding after a zero type word";
                        break outer;
                    }
                    pos += room;
                    continue outer;
                }
            }
        }
        s.position = pos;
        s.clean = clean;
        s.reason = stop;
        s.nextGlobal = expected;
        s.records = records;
        for (Open st : new ArrayList<>(s.open.values())) {
            s.streams.add(new Stream(st.number, st.ident, st.start, "open", st.chunks.toByteArray(), st.position));
        }
        return s;
    }

    private static void checkRealEnd(byte[] f, String path, long end, long page, long limit, long expected) {
        long pos = ((end + page + page - 1) / page) * page;
        for (; pos + RECORD_OVERHEAD <= limit; pos += page) {
            int p = (int) pos;
            long type = u32(f, p);
            long global = u32(f, p + 4);
            long total = RECORD_OVERHEAD + u32(f, p + 16);
            if (type != 0 && pos + total <= limit && isAhead(global, expected) && checkOk(f, pos, total - RECORD_OVERHEAD)) {
                throw new CorruptFileException(path, end,
                    "the end of the journal (nothing intact numbered " + expected + " or later after it)",
                    "zeros where a transaction should start, and an intact record " + global + " at offset " + pos
                        + ": the journal goes on past a damaged region");
            }
        }
    }

    /** The original reader's per-record state machine (reader.c), as reader._handle_record. */
    private static void record(Scan s, long type, long number, long rec, byte[] f, int off, int len, long position) {
        Open st = s.open.get(number);
        if (st != null && rec != st.record) {
            s.anomaly("stream " + number + ": record number " + rec + ", expected " + st.record + "; dropping the stream",
                position);
            s.finish(st, "aborted");
            return;
        }
        if ((type & ABORT) != 0) {
            if (st == null) {
                s.anomaly("stream " + number + ": ABORT for a stream not open", position);
                return;
            }
            s.finish(st, "aborted");
        } else if ((type & INFO) != 0) {
            if (st != null) {
                s.anomaly("stream " + number + ": INFO for a stream already open; ignored", position);
                return;
            }
            if (len < 4) {
                s.anomaly("stream " + number + ": INFO data of " + len + " bytes is too short", position);
                return;
            }
            long offset = u32(f, off);
            byte[] ident = java.util.Arrays.copyOfRange(f, off + 4, off + len);
            s.open.put(number, new Open(number, ident, offset, rec, position));
        } else {
            if ((type & DATA) != 0) {
                if (st == null) {
                    s.anomaly("stream " + number + ": DATA for a stream not open", position);
                } else {
                    st.chunks.write(f, off, len);
                    st.offset = (st.offset + len) & U32;
                    st.record++;
                }
            }
            if ((type & EOS) != 0) {
                if (st == null) {
                    s.anomaly("stream " + number + ": EOS for a stream not open", position);
                } else {
                    s.finish(st, "complete");
                }
            }
            if ((type & (DATA | EOS)) == 0) {
                s.anomaly("stream " + number + ": record type 0x" + Long.toHexString(type) + " has no known type bit; ignored",
                    position);
            }
        }
    }
}
