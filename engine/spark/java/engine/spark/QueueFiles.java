package engine.spark;

import java.util.function.BiPredicate;

/**
 * Whole queue files read with the queue readers' rules and errors: a finished writer (journal) file
 * the way {@code engine.queue.cursor.ColumnCursor} reads one (magic, CHECKs, the end, ids that must
 * increase), and a reader checkpoint file the way {@code engine.queue.checkpoint.load_reader_file}
 * loads one. Every error is a {@link CorruptFileException} naming the file and the offset, word for
 * word the Python one.
 */
public final class QueueFiles {
    private QueueFiles() {
    }

    /** Bytes the Python column scanner reads first ({@code cursor.COLUMN_CHUNK}). */
    static final int CHUNK = 8 << 20;
    /** Bytes {@code segments.read_first_id} reads first ({@code _FIRST_READ}). */
    static final int FIRST_READ = 64 * 1024 + 4096;
    /** {@link #firstId}'s answer when the bytes given end before the first checked write. */
    static final long MORE = -2;

    /** PUTs per run of columns ({@code cursor.COLUMN_ITEMS}). */
    static final int RUN_ITEMS = 65536;

    /**
     * The items of finished writer file {@code path} (its bytes {@code data[0, size)}), oldest first,
     * handed to {@code sink} (true: go on) as runs of columns over {@code data} with the highest id before the run.
     * Damage raises once the items before it were handed out, as the Python cursor does: a record
     * the file ends inside, records no CHECK vouches for at the end, data after an end marker, ids
     * that do not increase, a bad record or a CHECK that does not match.
     *
     * <p>Whole PUTs after the last CHECK whose ids continue one by one up to the id before {@code
     * nextId} (the next file's first; -1: unknown) are what libkestrel appended before it started a
     * newer file: read, as the cursor does ({@code RecordScanner.accept_foreign_tail}).
     */
    public static void readJournal(String path, byte[] data, int size, long lastId, long nextId,
                                   BiPredicate<QueueCodec.Columns, Long> sink) {
        readJournal(path, data, size, lastId, nextId, false, sink);
    }

    /**
     * As above; {@code growing}: the newest file, which a writer may still be writing (as the
     * cursor reads it): bytes after its last whole, checked write are a write in progress or a
     * torn tail, not delivered, unless a valid CHECK follows them (damage in the middle of the
     * file: raised). The sink returns whether to go on.
     */
    public static void readJournal(String path, byte[] data, int size, long lastId, long nextId, boolean growing,
                                   BiPredicate<QueueCodec.Columns, Long> sink) {
        checkWriterMagic(path, data, size);
        int resume = QueueCodec.MAGIC_SIZE;
        if (resume >= size) {
            return;
        }
        long last = lastId;
        try {
            // Judged on the first chunk the Python scanner reads (cursor.COLUMN_CHUNK), as it does.
            boolean checked = QueueCodec.usesChecks(data, resume, Math.min(size, CHUNK));
            boolean foreign = false;
            while (true) {
                int runStart = resume;
                QueueCodec.Columns c = QueueCodec.decodeColumns(data, resume, size, checked && !foreign, RUN_ITEMS);
                foreign = false;
                resume = c.end;
                if (c.items > 0) {
                    if (c.ids[0] <= last || !c.ascending) {
                        idsGoBack(path, c, last, runStart);
                    }
                    boolean more = sink.test(c, last);
                    last = c.ids[c.items - 1];
                    if (!more) {
                        return;
                    }
                    continue;
                }
                int unverified = c.scanned - c.end;
                if (c.stop.equals("marker")) {
                    if (checked) {
                        for (int k = c.scanned; k < size; k++) {
                            if (data[k] != 0) {
                                throw new CorruptFileException(path, c.scanned, "only zero bytes after an end marker",
                                    "data after it");
                            }
                        }
                    }
                }
                if (growing) {
                    if ((c.scanned < size && !c.stop.equals("marker")) || unverified > 0) {
                        stall(path, data, c.end, size);
                    }
                    return;
                }
                if (!c.stop.equals("marker") && c.scanned < size) {
                    throw new CorruptFileException(path, c.scanned, "a whole record", "the file ends inside it");
                }
                if (unverified > 0 && checked && foreignTail(data, c, last, nextId)) {
                    foreign = true;
                    continue;
                }
                if (unverified > 0) {
                    throw new CorruptFileException(path, c.scanned - unverified,
                        "a CHECK record after the records from here", "the file ends without one");
                }
                return;
            }
        } catch (QueueCodec.BadRecord e) {
            throw e.in(path, 0);
        }
    }

    /**
     * {@code JournalCursor._judge_stall} for a file no writer is writing: the bytes from {@code
     * start} (the last CHECK boundary) are a torn tail (nothing delivered) unless a valid CHECK
     * vouching for later bytes follows (damage in the middle of the file).
     */
    static void stall(String path, byte[] data, int start, int size) {
        byte[] rest = java.util.Arrays.copyOfRange(data, start, size);
        int hit = QueueCodec.findValidCheck(rest, 1, 0, rest.length);
        if (hit >= 0) {
            throw new CorruptFileException(path, start,
                "a valid record (damage in the middle of the file: run `engine queue repair`)",
                "records that do not decode or match their CHECK; a valid CHECK follows at offset " + (start + hit));
        }
    }

    /** {@code segments.open_segment_handle} (allow_short): FormatError unless the writer magic (or a prefix). */
    static void checkWriterMagic(String path, byte[] data, int size) {
        if (!QueueCodec.hasMagic(data, size, QueueCodec.WRITER_MAGIC) && !halfCreated(data, size)) {
            String what = size < QueueCodec.MAGIC_SIZE ? "truncated header" : QueueCodec.hexSpaced(data, size);
            throw new CorruptFileException(path, 0, "writer journal magic 27 64 26 03", what, true);
        }
    }

    /**
     * {@code segments.read_first_id}: the id of the first PUT a CHECK vouches for (-1: none yet).
     * {@code finished} (not the newest file): damage there raises; in the newest it is -1. {@code
     * data[0, size)} is the file's start ({@link #FIRST_READ} bytes, more when its first write is
     * longer): {@link #MORE} when the file has more and its first write does not end in them.
     */
    static long firstId(String path, byte[] data, int size, boolean finished, long fileSize) {
        checkWriterMagic(path, data, size);
        int pos = QueueCodec.MAGIC_SIZE;
        if (pos >= size) {
            return size < fileSize ? MORE : -1;
        }
        try {
            boolean checked = QueueCodec.usesChecks(data, pos, Math.min(size, FIRST_READ));
            QueueCodec.Columns c = QueueCodec.decodeColumns(data, pos, size, checked, 1);
            if (c.items > 0) {
                return c.ids[0];
            }
            if (size < fileSize) {
                return MORE;
            }
            if (c.stop.equals("marker") && checked) {
                for (int k = c.scanned; k < size; k++) {
                    if (data[k] != 0) {
                        throw new QueueCodec.BadRecord(c.scanned, "only zero bytes after an end marker", "data after it");
                    }
                }
            }
            int unverified = c.scanned - c.end;
            boolean incomplete = !c.stop.equals("marker") && c.scanned < size;
            if (finished && (incomplete || unverified > 0)) {
                throw new CorruptFileException(path, c.end, "a whole, checked first write", "the file ends inside it");
            }
            return -1;
        } catch (QueueCodec.BadRecord e) {
            if (finished) {
                throw e.in(path, 0);
            }
            return -1;
        }
    }

    /**
     * {@code RecordScanner.accept_foreign_tail} and {@code segments.foreign_records}: whether the
     * unverified records {@code data[c.end, c.scanned)} at the end of a finished file (or before a
     * zero tail) are whole PUTs continuing from {@code last} (0: from the first one's) up to {@code
     * nextId - 1}, with no CHECK among them vouching for bytes (this engine's records framed anew).
     */
    static boolean foreignTail(byte[] data, QueueCodec.Columns c, long last, long nextId) {
        int start = c.end;
        int stop = c.scanned;
        if (c.stop.equals("marker") && stop > start && data[stop - 1] == 0) {
            return false; // zeros reaching back into the last record: never delivered as data
        }
        byte[] tail = java.util.Arrays.copyOfRange(data, start, stop);
        int pos = 0;
        int count = 0;
        long top = last;
        while (pos < tail.length) {
            long[] rec;
            try {
                rec = QueueCodec.decodeRecord(tail, pos, tail.length);
            } catch (QueueCodec.BadRecord | QueueCodec.Incomplete e) {
                break;
            }
            long xid = QueueCodec.i64(tail, pos + 9);
            if (rec[0] != QueueCodec.PUT || (top != 0 && xid != top + 1)) {
                break;
            }
            pos = (int) rec[1];
            count++;
            top = xid;
        }
        if (count > 0 && QueueCodec.findValidCheck(tail, 1, 0, tail.length) >= 0) {
            return false;
        }
        boolean clean = pos == tail.length;
        return clean && count > 0 && (nextId < 0 || top + 1 == nextId);
    }

    /** {@code segments.is_half_created}: a file cut short before its magic was durable. */
    static boolean halfCreated(byte[] data, int size) {
        if (size >= QueueCodec.MAGIC_SIZE) {
            return false;
        }
        for (int k = 0; k < size; k++) {
            if (data[k] != QueueCodec.WRITER_MAGIC[k]) {
                return false;
            }
        }
        return true;
    }

    private static void idsGoBack(String path, QueueCodec.Columns c, long last, int runStart) {
        for (int k = 0; k < c.items; k++) {
            if (c.ids[k] <= last) {
                throw new CorruptFileException(path, runStart, "item ids above " + last + " in the records from here",
                    Long.toString(c.ids[k]));
            }
            last = c.ids[k];
        }
    }

    /** {@code checkpoint.load_reader_file}: (head, done ids) of reader file {@code path}. */
    public static QueueCodec.ReaderFile readReader(String path, byte[] data, int size) {
        if (!QueueCodec.hasMagic(data, size, QueueCodec.READER_MAGIC)) {
            String found = size == 0 ? "an empty file" : QueueCodec.hexSpaced(data, size);
            throw new CorruptFileException(path, 0, "reader checkpoint magic 26 3c 26 03", found, true);
        }
        try {
            return QueueCodec.decodeReaderFile(data, size);
        } catch (QueueCodec.Incomplete e) {
            throw new CorruptFileException(path, e.offset, "a whole record", "the file ends inside it");
        } catch (QueueCodec.BadRecord e) {
            throw e.in(path, 0);
        }
    }
}
