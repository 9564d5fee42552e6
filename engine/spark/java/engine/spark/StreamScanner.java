package engine.spark;

import java.io.ByteArrayOutputStream;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;

/**
 * One journald journal read front to back, whole streams out: the twin of
 * {@code engine.streams.reader.JournalScan.streams()}.  The file is read through {@link Hfs}
 * in windows of at most {@code window} bytes at long offsets, so a file of any size is read
 * with that much memory besides the streams being assembled (nothing at all is assembled for
 * a column not read: {@code keepIdent}, {@code keepData}).
 *
 * <p>Every check code is verified whatever is kept (a record larger than the window window by
 * window).  The first record that fails its check code or its global record number (or runs
 * past the end) is the end of the journal (a torn transaction: {@link #clean} false and
 * {@link #reason}, as the Python scan's {@code end}); a zero page at a transaction start is a
 * clean end, probed past for intact records numbered ahead when page 0 carries engine's mark
 * (damage: {@link CorruptFileException} with the file and offset, same words as Python).
 * Records that pass their checks but make no sense for their stream are {@link #anomalies}.
 * Streams come out as the Python scan gives them: each complete or aborted one when its end
 * is read, then those left open by number.  Not thread-safe; {@link #close} closes the file.
 */
final class StreamScanner implements AutoCloseable {
    /** The default read window: large reads for any Hadoop file system, small beside a task's memory. */
    static final int WINDOW = 4 << 20;
    /** The smallest window: page 0's head and a record header always fit in one. */
    static final int MIN_WINDOW = 64;
    private static final java.lang.invoke.VarHandle LE64 =
        java.lang.invoke.MethodHandles.byteArrayViewVarHandle(long[].class, java.nio.ByteOrder.LITTLE_ENDIAN);

    private final Hfs fs;
    private final String path;
    private final boolean keepIdent;
    private final boolean keepData;
    private final byte[] buf;
    /** {@code buf[0, have)} holds the file's bytes from {@code base}. */
    private long base;
    private int have;
    private final long page;
    private final long limit;
    private final boolean strict;
    private long pos;
    private long expected;
    private long records;
    private boolean atStart = true;
    private final TreeMap<Long, Open> open = new TreeMap<>();
    private final ArrayDeque<StreamCodec.Stream> finished = new ArrayDeque<>();
    /** Records that passed their checks but make no sense for their stream ("offset N: ..."). */
    final List<String> anomalies = new ArrayList<>();
    /** Set when the walk has stopped: where, whether at a clean end, why. */
    boolean done;
    long endPosition;
    boolean clean;
    String reason;

    private static final class Open {
        final long number;
        final byte[] ident;
        final long start;
        final long position;
        final ByteArrayOutputStream chunks;
        long record;
        long length;

        Open(long number, byte[] ident, long start, long record, long position, boolean keep) {
            this.number = number;
            this.ident = ident;
            this.start = start;
            this.record = record;
            this.position = position;
            this.chunks = keep ? new ByteArrayOutputStream() : null;
        }

        StreamCodec.Stream done(String status) {
            return new StreamCodec.Stream(number, ident, start, status, chunks == null ? null : chunks.toByteArray(),
                length, position);
        }
    }

    /**
     * Opens {@code path} ({@code fs} is this scanner's: it is closed with it) and checks page 0.
     *
     * @throws CorruptFileException a damaged or foreign header, or a file under two pages
     */
    StreamScanner(Hfs fs, String path, int window, boolean keepIdent, boolean keepData) {
        this.fs = fs;
        this.path = path;
        this.keepIdent = keepIdent;
        this.keepData = keepData;
        try {
            long size = fs.size(path);
            if (size < 0) {
                throw new java.io.UncheckedIOException(new java.io.FileNotFoundException(path));
            }
            byte[] head = fs.readAt(path, 0, StreamCodec.HEAD_SIZE);
            this.page = StreamCodec.pageSize(head, path);
            this.strict = StreamCodec.marked(head);
            this.limit = size - size % page;
            if (limit < 2 * page) {
                throw new CorruptFileException(path, size, "at least 2 pages of " + page + " bytes", size + " bytes");
            }
            this.buf = new byte[(int) Math.max(MIN_WINDOW, Math.min(window, limit))];
            this.pos = page;
            this.expected = StreamCodec.u32(head, 16);
        } catch (RuntimeException e) {
            fs.close();
            throw e;
        }
    }

    /** Records read (the Python scan's {@code end.records}). */
    long records() {
        return records;
    }

    /** The global number the next record would carry ({@code end.next_global}). */
    long nextGlobal() {
        return expected;
    }

    /** The next whole stream, or null when there is none left (then {@link #done} is set). */
    StreamCodec.Stream next() {
        while (finished.isEmpty() && !done) {
            step();
        }
        return finished.poll();
    }

    @Override
    public void close() {
        fs.close();
    }

    // -- the window ---------------------------------------------------------------------------

    /** The index in {@code buf} of the file's byte {@code at}, with {@code n <= buf.length} bytes there. */
    private int at(long at, int n) {
        if (at < base || at + n > base + have) {
            base = at;
            have = fs.readInto(path, at, buf, (int) Math.min(buf.length, limit - at), limit);
        }
        return (int) (at - base);
    }

    private long word(long at) {
        return StreamCodec.u32(buf, at(at, 4));
    }

    private boolean zeros(long from, long len) {
        for (long done = 0; done < len; ) {
            int n = (int) Math.min(len - done, buf.length);
            int i = at(from + done, n);
            int k = i;
            long any = 0;
            for (; k + 8 <= i + n; k += 8) {
                any |= (long) LE64.get(buf, k);
            }
            for (; k < i + n; k++) {
                any |= buf[k];
            }
            if (any != 0) {
                return false;
            }
            done += n;
        }
        return true;
    }

    /** The check code of the record at {@code at} with {@code length} data bytes (all of it within the limit). */
    private boolean checkOk(long at, long length) {
        long body = StreamCodec.RECORD_HEADER_SIZE + length;
        long crc = -1L;
        for (long done = 0; done < body; ) {
            int n = (int) Math.min(body - done, buf.length);
            crc = StreamCodec.crc64Update(crc, buf, at(at + done, n), n);
            done += n;
        }
        return StreamCodec.le64(buf, at(at + body, StreamCodec.CHECK_SIZE)) == ~crc;
    }

    /** Bytes {@code [from, from + len)} appended to {@code out}, window by window. */
    private void copy(long from, long len, ByteArrayOutputStream out) {
        for (long done = 0; done < len; ) {
            int n = (int) Math.min(len - done, buf.length);
            out.write(buf, at(from + done, n), n);
            done += n;
        }
    }

    // -- the walk (JournalScan._scan) ------------------------------------------------------------

    private void stop(String why, boolean isClean) {
        done = true;
        endPosition = pos;
        clean = isClean;
        reason = why;
        for (Open st : open.values()) {
            finished.add(st.done("open"));
        }
        open.clear();
    }

    /** One step: a transaction start's check, or one record. */
    private void step() {
        if (atStart) {
            if (pos + 4 > limit) {
                stop("end of file without the zero page that ends a journal", false);
                return;
            }
            if (word(pos) == 0) {
                // Both writers end the journal with a whole zero page.
                if (pos + page > limit || !zeros(pos, page)) {
                    stop("a zero type word not followed by a zero page", false);
                } else {
                    if (strict) {
                        checkRealEnd();
                    }
                    stop("end of journal", true);
                }
                return;
            }
            atStart = false;
        }
        if (pos + StreamCodec.RECORD_OVERHEAD > limit) {
            stop("record header runs past the end of the file", false);
            return;
        }
        int h = at(pos, StreamCodec.RECORD_HEADER_SIZE);
        long type = StreamCodec.u32(buf, h);
        long global = StreamCodec.u32(buf, h + 4);
        long number = StreamCodec.u32(buf, h + 8);
        long rec = StreamCodec.u32(buf, h + 12);
        long length = StreamCodec.u32(buf, h + 16);
        long total = StreamCodec.RECORD_OVERHEAD + length;
        if (pos + total > limit) {
            stop("record length " + length + " runs past the end of the file", false);
            return;
        }
        if (!checkOk(pos, length)) {
            stop("check code mismatch in record " + expected, false);
            return;
        }
        if (global != expected) {
            stop("global record number " + global + ", expected " + expected, false);
            return;
        }
        record(type, number, rec, pos + StreamCodec.RECORD_HEADER_SIZE, length, pos);
        records++;
        expected = (expected + 1) & StreamCodec.U32;
        pos += total;
        long room = page - pos % page;
        if (room == page) {
            atStart = true;  // the record ended on a page boundary: a new start
            return;
        }
        // A type word may straddle the page end; its top bytes are zero, so it reads 0 when
        // the transaction ended (zero padding, then the next page) and non-zero when a record follows.
        if (pos + 4 > limit || word(pos) == 0) {
            if (!zeros(pos, room)) {
                stop("non-zero bytes in the padding after a zero type word", false);
                return;
            }
            pos += room;
            atStart = true;
        }
    }

    /** Past a clean end of a marked journal: an intact record numbered ahead means damage, not the end. */
    private void checkRealEnd() {
        long end = pos;
        for (long p = end + page; p + StreamCodec.RECORD_OVERHEAD <= limit; p += page) {
            int h = at(p, StreamCodec.RECORD_HEADER_SIZE);
            long type = StreamCodec.u32(buf, h);
            long global = StreamCodec.u32(buf, h + 4);
            long length = StreamCodec.u32(buf, h + 16);
            if (type != 0 && p + StreamCodec.RECORD_OVERHEAD + length <= limit && StreamCodec.isAhead(global, expected)
                && checkOk(p, length)) {
                throw new CorruptFileException(path, end,
                    "the end of the journal (nothing intact numbered " + expected + " or later after it)",
                    "zeros where a transaction should start, and an intact record " + global + " at offset " + p
                        + ": the journal goes on past a damaged region");
            }
        }
    }

    private void anomaly(String message, long position) {
        anomalies.add("offset " + position + ": " + message);
    }

    private void finish(Open st, String status) {
        open.remove(st.number);
        finished.add(st.done(status));
    }

    /** The original reader's per-record state machine (reader.c), as reader._handle_record; data at {@code off}. */
    private void record(long type, long number, long rec, long off, long len, long position) {
        Open st = open.get(number);
        if (st != null && rec != st.record) {
            anomaly("stream " + number + ": record number " + rec + ", expected " + st.record + "; dropping the stream",
                position);
            finish(st, "aborted");
            return;
        }
        if ((type & StreamCodec.ABORT) != 0) {
            if (st == null) {
                anomaly("stream " + number + ": ABORT for a stream not open", position);
                return;
            }
            finish(st, "aborted");
        } else if ((type & StreamCodec.INFO) != 0) {
            if (st != null) {
                anomaly("stream " + number + ": INFO for a stream already open; ignored", position);
                return;
            }
            if (len < 4) {
                anomaly("stream " + number + ": INFO data of " + len + " bytes is too short", position);
                return;
            }
            long offset = word(off);
            byte[] ident = null;
            if (keepIdent) {
                ByteArrayOutputStream out = new ByteArrayOutputStream((int) Math.min(len - 4, buf.length));
                copy(off + 4, len - 4, out);
                ident = out.toByteArray();
            }
            open.put(number, new Open(number, ident, offset, rec, position, keepData));
        } else {
            if ((type & StreamCodec.DATA) != 0) {
                if (st == null) {
                    anomaly("stream " + number + ": DATA for a stream not open", position);
                } else {
                    if (st.chunks != null) {
                        copy(off, len, st.chunks);
                    }
                    st.length += len;
                    st.record++;
                }
            }
            if ((type & StreamCodec.EOS) != 0) {
                if (st == null) {
                    anomaly("stream " + number + ": EOS for a stream not open", position);
                } else {
                    finish(st, "complete");
                }
            }
            if ((type & (StreamCodec.DATA | StreamCodec.EOS)) == 0) {
                anomaly("stream " + number + ": record type 0x" + Long.toHexString(type) + " has no known type bit; ignored",
                    position);
            }
        }
    }
}
