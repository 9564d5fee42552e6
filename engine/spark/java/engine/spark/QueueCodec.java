package engine.spark;

import java.util.zip.CRC32;

/**
 * The queue journal's records, decoded in the JVM: the twin of {@code engine.queue.codec}'s
 * {@code decode_record}, {@code decode_columns}, {@code find_valid_check} and
 * {@code decode_reader_file} (docs/formats/queue.md), with the same outcomes (a whole record,
 * {@link Incomplete}, {@link BadRecord} with the same offset and words). Pure: bytes in, values out.
 *
 * <p>Record = command byte {@code (command << 4) | header words}, 4 bytes per header word, then a
 * data block for commands 8..15 (its length the first header i32). All little-endian.
 */
public final class QueueCodec {
    private QueueCodec() {
    }

    public static final int MAGIC_SIZE = 4;
    public static final byte[] WRITER_MAGIC = {0x27, 0x64, 0x26, 0x03};
    public static final byte[] READER_MAGIC = {0x26, 0x3c, 0x26, 0x03};
    /** PUT without expiry: 0x86, then i32 size | i32 error_count | i64 id | i64 add_time (24 bytes). */
    static final int PUT_BYTE = 0x86;
    static final int PUT_HEADER = 24;
    /** PUT with expiry: 0x88, then the same and i64 expire_time (32 bytes). */
    static final int PUT_BYTE_EXPIRY = 0x88;
    static final int PUT_HEADER_EXPIRY = 32;
    /** CHECK: 0x22, then u32 crc32 | u32 length of the bytes since the previous CHECK (8 bytes). */
    static final int CHECK_BYTE = 0x22;
    static final int CHECK_SIZE = 9;
    static final int CMD_READ_HEAD = 0;
    static final int CMD_CHECK = 2;
    static final int CMD_PUT = 8;
    static final int CMD_READ_DONE = 9;
    /** {@code codec.MAX_ERROR_COUNT}: a plausible error count (a torn tail is random bytes). */
    static final int MAX_ERROR_COUNT = 1 << 24;

    /** {@code codec.BadRecord}: bytes at {@code offset} that can never be a valid record. */
    public static class BadRecord extends Exception {
        private static final long serialVersionUID = 1L;
        public final long offset;
        public final String expected;
        public final String found;

        BadRecord(long offset, String expected, String found) {
            super("offset " + offset + ": expected " + expected + (found == null ? "" : ", found " + found));
            this.offset = offset;
            this.expected = expected;
            this.found = found;
        }

        /** The error as the typed one of a file ({@code segments.corrupt}). */
        public CorruptFileException in(String path, long shift) {
            return new CorruptFileException(path, offset + shift, expected, found);
        }
    }

    /** {@code codec.Incomplete}: the bytes end inside the record at {@code offset}. */
    public static final class Incomplete extends Exception {
        private static final long serialVersionUID = 1L;
        public final long offset;

        Incomplete(long offset) {
            super("record at offset " + offset + " is incomplete", null, false, false);
            this.offset = offset;
        }
    }

    static int i32(byte[] b, int at) {
        return (b[at] & 0xff) | (b[at + 1] & 0xff) << 8 | (b[at + 2] & 0xff) << 16 | (b[at + 3] & 0xff) << 24;
    }

    static long u32(byte[] b, int at) {
        return i32(b, at) & 0xffffffffL;
    }

    static long i64(byte[] b, int at) {
        return (i32(b, at) & 0xffffffffL) | ((long) i32(b, at + 4)) << 32;
    }

    static long crc(byte[] b, int from, int to) {
        CRC32 c = new CRC32();
        c.update(b, from, to - from);
        return c.getValue();
    }

    /** Kinds of a decoded record ({@link #decodeRecord}). */
    static final int MARKER = 0;
    static final int PUT = 1;
    static final int READ_HEAD = 2;
    static final int READ_DONE = 3;
    static final int CHECK = 4;
    static final int UNKNOWN = 5;

    /**
     * {@code codec.decode_record}: the kind of the record at {@code pos} and its end ({@code
     * (kind << 40) | end} would be obscure: a two-slot array). MARKER with end {@code pos}: the
     * end marker or the end of the buffer at a record boundary.
     */
    static long[] decodeRecord(byte[] buf, int pos, int size) throws BadRecord, Incomplete {
        if (pos >= size || buf[pos] == 0) {
            return new long[] {MARKER, pos};
        }
        int cmdByte = buf[pos] & 0xff;
        int command = cmdByte >> 4;
        int words = cmdByte & 0x0f;
        long headerEnd = pos + 1 + 4L * words;
        if (headerEnd > size) {
            throw new Incomplete(pos);
        }
        if (command == CMD_PUT) {
            if (words != 6 && words != 8) {
                throw new BadRecord(pos, "PUT with 6 or 8 header words", Integer.toString(words));
            }
            int length = i32(buf, pos + 1);
            int errors = i32(buf, pos + 5);
            long xid = i64(buf, pos + 9);
            if (length < 0) {
                throw new BadRecord(pos, "a PUT data size >= 0", Integer.toString(length));
            }
            if (xid <= 0) {
                throw new BadRecord(pos, "a positive item id", Long.toString(xid));
            }
            if (errors < 0 || errors > MAX_ERROR_COUNT) {
                throw new BadRecord(pos, "a plausible error count", Integer.toString(errors));
            }
            long end = headerEnd + length;
            if (end > size) {
                throw new Incomplete(pos);
            }
            return new long[] {PUT, end};
        }
        if (command == CMD_READ_HEAD && words == 2) {
            long xid = i64(buf, pos + 1);
            if (xid < 0) {
                throw new BadRecord(pos, "a READ_HEAD id >= 0", Long.toString(xid));
            }
            return new long[] {READ_HEAD, headerEnd};
        }
        if (command == CMD_READ_DONE && words == 1) {
            int length = i32(buf, pos + 1);
            if (length < 0 || length % 8 != 0) {
                throw new BadRecord(pos, "a READ_DONE byte length that is a multiple of 8", Integer.toString(length));
            }
            long end = headerEnd + length;
            if (end > size) {
                throw new Incomplete(pos);
            }
            return new long[] {READ_DONE, end};
        }
        if (command == CMD_CHECK && words == 2) {
            return new long[] {CHECK, headerEnd};
        }
        if (command == CMD_READ_HEAD || command == CMD_READ_DONE) {
            throw new BadRecord(pos, "command " + command + " with its fixed header size", words + " words");
        }
        long end = headerEnd;
        if ((command & 0x8) != 0) {
            if (words == 0) {
                throw new BadRecord(pos, "a data-carrying command with a length word", null);
            }
            int length = i32(buf, pos + 1);
            if (length < 0) {
                throw new BadRecord(pos, "a data length >= 0", Integer.toString(length));
            }
            end += length;
            if (end > size) {
                throw new Incomplete(pos);
            }
        }
        return new long[] {UNKNOWN, end};
    }

    /** {@code codec.find_valid_check}: the first CHECK at or after {@code start} vouching for real data, or -1. */
    static int findValidCheck(byte[] buf, int start, int floor, int size) {
        for (int pos = start; pos + CHECK_SIZE <= size; pos++) {
            if ((buf[pos] & 0xff) != CHECK_BYTE) {
                continue;
            }
            long want = u32(buf, pos + 1);
            long length = u32(buf, pos + 5);
            if (0 < length && length <= pos - floor && crc(buf, (int) (pos - length), pos) == want) {
                return pos;
            }
        }
        return -1;
    }

    /** {@code ChecksumMismatch}: the CHECK at {@code checkAt} does not match the bytes from {@code offset}. */
    static BadRecord mismatch(long offset, long checkAt, long covered, long length) {
        return new BadRecord(offset, "records matching the CHECK record at offset " + checkAt,
            "a crc32 mismatch over " + covered + " bytes"
                + (covered == length ? "" : " (the CHECK covers " + length + " bytes)"));
    }

    /** The PUTs of a run of records as columns ({@code codec.PutColumns}). */
    public static final class Columns {
        /** Just past the last record the columns cover; where decoding stopped; why. */
        public int end;
        public int scanned;
        public String stop;
        public int items;
        public boolean ascending = true;
        public long[] ids;
        public long[] addTimes;
        public long[] expireTimes;
        public boolean[] hasExpiry;
        public int[] errorCounts;
        /** Item k's data is {@code buf[dataAt[k], dataAt[k] + dataLen[k])} of the decoded buffer. */
        public int[] dataAt;
        public int[] dataLen;

        Columns(int capacity) {
            ids = new long[capacity];
            addTimes = new long[capacity];
            expireTimes = new long[capacity];
            hasExpiry = new boolean[capacity];
            errorCounts = new int[capacity];
            dataAt = new int[capacity];
            dataLen = new int[capacity];
        }

        void grow() {
            int n = ids.length * 2;
            ids = java.util.Arrays.copyOf(ids, n);
            addTimes = java.util.Arrays.copyOf(addTimes, n);
            expireTimes = java.util.Arrays.copyOf(expireTimes, n);
            hasExpiry = java.util.Arrays.copyOf(hasExpiry, n);
            errorCounts = java.util.Arrays.copyOf(errorCounts, n);
            dataAt = java.util.Arrays.copyOf(dataAt, n);
            dataLen = java.util.Arrays.copyOf(dataLen, n);
        }
    }

    /**
     * {@code codec.decode_columns}: the PUTs of the records of {@code buf[pos, size)} a CHECK vouches
     * for ({@code checked}: the file uses CHECKs; every whole PUT otherwise), at most about {@code
     * maxItems}; the same stops ("end", "incomplete", "marker", "more") and errors. A bad record or a
     * CHECK that does not match after PUTs returned is left for the next call (from {@code end}).
     */
    public static Columns decodeColumns(byte[] buf, int pos, int size, boolean checked, int maxItems)
            throws BadRecord {
        Columns c = new Columns(Math.min(maxItems, 1024));
        int n = 0;
        int since = pos;
        int end = pos;
        int vouched = 0;
        String stop = "more";
        while (vouched < maxItems) {
            if (pos >= size) {
                stop = "end";
                break;
            }
            int cmd = buf[pos] & 0xff;
            if (cmd == PUT_BYTE || cmd == PUT_BYTE_EXPIRY) {
                int start = pos + 1 + (cmd == PUT_BYTE ? PUT_HEADER : PUT_HEADER_EXPIRY);
                if (start > size) {
                    stop = "incomplete";
                    break;
                }
                int length = i32(buf, pos + 1);
                int errors = i32(buf, pos + 5);
                long xid = i64(buf, pos + 9);
                if (length >= 0 && xid > 0 && errors >= 0 && errors <= MAX_ERROR_COUNT) {
                    if ((long) start + length > size) {
                        stop = "incomplete";
                        break;
                    }
                    if (n == c.ids.length) {
                        c.grow();
                    }
                    c.ids[n] = xid;
                    c.addTimes[n] = i64(buf, pos + 17);
                    c.hasExpiry[n] = cmd == PUT_BYTE_EXPIRY;
                    c.expireTimes[n] = cmd == PUT_BYTE_EXPIRY ? i64(buf, pos + 25) : 0;
                    c.errorCounts[n] = errors;
                    c.dataAt[n] = start;
                    c.dataLen[n] = length;
                    n++;
                    pos = start + length;
                    if (!checked) {
                        vouched = n;
                        end = pos;
                    }
                    continue;
                }
            } else if (cmd == CHECK_BYTE) {
                if (pos + CHECK_SIZE > size) {
                    stop = "incomplete";
                    break;
                }
                if (checked) {
                    long want = u32(buf, pos + 1);
                    long length = u32(buf, pos + 5);
                    long total = pos - since;
                    if (length != total || crc(buf, since, pos) != want) {
                        if (vouched > 0) {
                            break; // "more": the PUTs vouched for first, the error on the next call
                        }
                        throw mismatch(pos - total, pos, total, length);
                    }
                    vouched = n;
                    since = pos + CHECK_SIZE;
                }
                pos += CHECK_SIZE;
                if (!checked) {
                    end = pos;
                }
                continue;
            }
            // Anything else (and PUTs with impossible fields, to get the right error).
            long[] rec;
            try {
                rec = decodeRecord(buf, pos, size);
            } catch (Incomplete e) {
                stop = "incomplete";
                break;
            } catch (BadRecord e) {
                if (vouched > 0) {
                    stop = "more";
                    break;
                }
                throw e;
            }
            if (rec[0] == MARKER) {
                stop = "marker";
                break;
            }
            pos = (int) rec[1];
            if (!checked) {
                end = pos;
            }
        }
        if (checked) {
            end = since;
        }
        c.end = end;
        c.scanned = pos;
        c.stop = stop;
        c.items = vouched;
        for (int k = 1; k < vouched; k++) {
            if (c.ids[k] <= c.ids[k - 1]) {
                c.ascending = false;
                break;
            }
        }
        return c;
    }

    /** {@code RecordScanner._uses_checks}: whether a writer file (first record at {@code pos}) uses CHECKs. */
    public static boolean usesChecks(byte[] buf, int pos, int size) throws BadRecord {
        if ((buf[pos] & 0xff) == CHECK_BYTE) {
            return true;
        }
        if (findValidCheck(buf, pos, pos, size) >= 0) {
            throw new BadRecord(pos, "the empty CHECK record files with CHECK records start with",
                String.format("0x%02x", buf[pos] & 0xff));
        }
        return false;
    }

    /** A reader checkpoint: every id up to {@code head} is done, and the {@code done} ids above it. */
    public static final class ReaderFile {
        public final long head;
        public final long[] done;

        ReaderFile(long head, long[] done) {
            this.head = head;
            this.done = done;
        }
    }

    /**
     * {@code codec.decode_reader_file} (magic checked by the caller): later READ_HEAD / READ_DONE
     * records replace earlier ones; every CHECK must match, and a file starting with a CHECK must end
     * with one covering its records; a READ_HEAD is required.
     */
    public static ReaderFile decodeReaderFile(byte[] data, int size) throws BadRecord, Incomplete {
        int pos = MAGIC_SIZE;
        int since = MAGIC_SIZE;
        Long head = null;
        long[] done = new long[0];
        boolean checked = false;
        boolean vouchedAny = false;
        while (true) {
            long[] rec = decodeRecord(data, pos, size);
            int end = (int) rec[1];
            if (rec[0] == MARKER) {
                for (int k = end; k < size; k++) {
                    if (data[k] != 0) {
                        throw new BadRecord(end, "only zero bytes after the end marker", null);
                    }
                }
                break;
            }
            if (rec[0] == READ_HEAD) {
                head = i64(data, pos + 1);
            } else if (rec[0] == READ_DONE) {
                int count = i32(data, pos + 1) / 8;
                done = new long[count];
                for (int k = 0; k < count; k++) {
                    done[k] = i64(data, pos + 5 + 8 * k);
                }
            } else if (rec[0] == CHECK) {
                long want = u32(data, pos + 1);
                long length = u32(data, pos + 5);
                if (length != pos - since || crc(data, since, pos) != want) {
                    throw mismatch(since, pos, pos - since, length);
                }
                checked = checked || pos == MAGIC_SIZE;
                vouchedAny = length > 0;
                since = end;
            } else if (rec[0] == PUT) {
                throw new BadRecord(pos, "READ_HEAD or READ_DONE in a reader file", "PUT");
            }
            pos = end;
        }
        if (checked && (since != pos || !vouchedAny)) {
            throw new BadRecord(since, "a CHECK record covering the reader records", "the file ends without one");
        }
        if (head == null) {
            throw new BadRecord(MAGIC_SIZE, "a READ_HEAD record", "none in the file");
        }
        return new ReaderFile(head, done);
    }

    /** Whether {@code head} starts with {@code magic}. */
    public static boolean hasMagic(byte[] head, int size, byte[] magic) {
        if (size < MAGIC_SIZE) {
            return false;
        }
        for (int k = 0; k < MAGIC_SIZE; k++) {
            if (head[k] != magic[k]) {
                return false;
            }
        }
        return true;
    }

    /** Python's {@code bytes.hex(" ")} of the first bytes (up to the magic's size). */
    public static String hexSpaced(byte[] b, int size) {
        StringBuilder s = new StringBuilder();
        for (int k = 0; k < Math.min(size, MAGIC_SIZE); k++) {
            if (k > 0) {
                s.append(' ');
            }
            s.append(String.format("%02x", b[k] & 0xff));
        }
        return s.toString();
    }
}
