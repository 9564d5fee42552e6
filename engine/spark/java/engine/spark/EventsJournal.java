package engine.spark;

import java.io.FileNotFoundException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;

/**
 * The JVM twin of {@code engine.events.reader.EventReader}: a read-only snapshot of one event
 * journal directory ({@code meta}, {@code data} and the checksum side files {@code meta.crc},
 * {@code data.crc}; layouts in docs/formats/events.md) and replay of one persistence id.
 *
 * <p>Opening makes the checks {@code engine.events.recovery.load} makes for a reader (meta header
 * and blocks, every meta block against its {@code meta.crc} entry, each id's last block against
 * meta's highest sequence number, the roll forward along links, the first live block, the data
 * file reaching the committed end) and takes the {@code data.crc} entries below the committed end
 * ({@code DataSums.parse}).  Replay follows one id's links as {@code engine.events.runs.walk_runs_py}
 * does, checking every block (own offset, sequence number, previous link, size within the committed
 * end) and the {@code data.crc} batch holding it the first time this snapshot reaches it; a start
 * past the first live block is found as {@code engine.events.blocks.locate} finds it.  Every error
 * is a {@link CorruptFileException} whose words, file and offset are the Python reader's.
 */
final class EventsJournal {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger("engine.events");
    static final int DATA_HEADER_SIZE = 8;
    static final int META_HEADER_SIZE = 8;
    static final int META_BLOCK_FIXED_SIZE = 26;
    static final int BLOCK_HEADER_SIZE = 24;
    static final int BLOCK_NEXT_FIELD = 12;
    static final long MAX_DATA_SIZE = 0x7FFFFFFFL;
    static final int SUMS_HEADER_SIZE = 8;
    static final int DATA_SUMS_HEADER_SIZE = 12;
    static final int SUM_ENTRY_SIZE = 12;
    static final long ANY_PREVIOUS = -1;
    /** {@code engine.events.reader.SNAPSHOT_ATTEMPTS}: a snapshot torn by a live writer is read again. */
    static final int SNAPSHOT_ATTEMPTS = 5;
    /** Largest read-ahead window of replay (bytes): {@code engine.events.blocks.DEFAULT_READAHEAD}. */
    static final int READAHEAD = 256 * 1024;
    /** First read-ahead window of a replay ({@code engine.events.runs.MIN_WINDOW}). */
    static final int MIN_WINDOW = 4096;

    /** One persistence id: meta's block as loaded ({@code engine.events.layout.Entry}). */
    static final class Entry implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final String pid;
        final long first;
        final long last;
        final long highest;
        final long firstSeq;

        Entry(String pid, long first, long last, long highest, long firstSeq) {
            this.pid = pid;
            this.first = first;
            this.last = last;
            this.highest = highest;
            this.firstSeq = firstSeq;
        }

        /** How many events replay returns ({@code IdInfo.live}). */
        long live() {
            return Math.max(0, highest - firstSeq + 1);
        }
    }

    /** Where replay hands each event. */
    interface EventSink {
        void event(long seq, byte[] buf, int at, int len);
    }

    final String directory;
    final String dataPath;
    final String metaPath;
    final String dataSumsPath;
    final String metaSumsPath;
    private final Hfs fs;
    private long dataSize;
    private long end;
    private LinkedHashMap<String, Entry> entries;
    // data.crc: batch k is [ends[k-1] (8 for k = 0), ends[k]); checked: 0 unchecked, 1 good, 2 bad.
    private boolean dataSums;
    private long[] ends = new long[0];
    private long[] lasts = new long[0];
    private long[] crcs = new long[0];
    private byte[] checked = new byte[0];
    private int sumCount;
    private final Map<Integer, CorruptFileException> failures = new HashMap<>();
    // The data window replay reads through.
    private byte[] window = new byte[0];
    private long windowStart;
    private int windowLen;
    // Replay's read-ahead (as the Python walker's): the next window's size, and where the last
    // block decoded from the current window ends.
    private int want = MIN_WINDOW;
    private long served;

    private EventsJournal(Hfs fs, String directory) {
        this.fs = fs;
        this.directory = directory;
        this.dataPath = Hfs.join(directory, "data");
        this.metaPath = Hfs.join(directory, "meta");
        this.dataSumsPath = Hfs.join(directory, "data.crc");
        this.metaSumsPath = Hfs.join(directory, "meta.crc");
    }

    /** {@code EventReader.open}: the journal in {@code directory}, loaded (no lock, no repair). */
    static EventsJournal open(Hfs fs, String directory) {
        EventsJournal j = new EventsJournal(fs, directory);
        boolean meta = fs.exists(j.metaPath);
        boolean data = fs.exists(j.dataPath);
        if (!meta && !data) {
            throw new UncheckedIOException(new FileNotFoundException(
                "[Errno 2] no such event journal: " + Py.repr(directory)));
        }
        if (!meta || !data) {
            throw new ConfigException(directory + ": not an event journal (" + (meta ? j.dataPath : j.metaPath)
                + " is missing)");
        }
        for (int attempt = 0; ; attempt++) {
            try {
                j.load();
                return j;
            } catch (CorruptFileException e) {
                if (e.format || attempt == SNAPSHOT_ATTEMPTS - 1) {
                    throw e;  // a foreign file does not change by re-reading it
                }
            }
        }
    }

    /**
     * The snapshot the driver loaded ({@link #open}) for one part, on an executor: the part's ids
     * as loaded and the committed end, with {@code data.crc} read again up to that end.  Committed
     * blocks never change, so the part reads what the plan saw, whatever a writer appended since.
     */
    static EventsJournal snapshot(Hfs fs, String directory, List<Entry> ids, long end) {
        EventsJournal j = new EventsJournal(fs, directory);
        j.dataSize = fs.size(j.dataPath);
        if (j.dataSize < end) {
            throw new CorruptFileException(j.dataPath, j.dataSize, "data up to the end of the last blocks, " + end,
                "end of file");
        }
        j.end = end;
        j.loadDataSums();
        j.entries = new LinkedHashMap<>();
        for (Entry e : ids) {
            j.entries.put(e.pid, e);
        }
        return j;
    }

    /** The ids in meta-file order. */
    List<Entry> ids() {
        return new ArrayList<>(entries.values());
    }

    Entry entry(String pid) {
        return entries.get(pid);
    }

    /** The data file's committed length (header included). */
    long committedSize() {
        return end;
    }

    // -- opening ------------------------------------------------------------------------------

    private void load() {
        List<long[]> idSums = readMetaSums();
        byte[] metaBytes = fs.readAll(metaPath);
        idSums = readMetaSums();  // re-read after meta (a writer writes an id's entry first)
        byte[] head = java.util.Arrays.copyOf(metaBytes, Math.min(META_HEADER_SIZE, metaBytes.length));
        long blocksSize = decodeMetaHeader(head);
        long committed = META_HEADER_SIZE + blocksSize;
        if (metaBytes.length < committed) {
            throw new CorruptFileException(metaPath, metaBytes.length,
                blocksSize + " bytes of meta blocks (header's size)", "end of file");
        }
        List<Object[]> blocks = decodeMetaBlocks(metaBytes, (int) committed);
        decodeDataHeader(fs.readAt(dataPath, 0, DATA_HEADER_SIZE));
        dataSize = fs.size(dataPath);
        HeaderReader reader = new HeaderReader(MAX_DATA_SIZE);
        LinkedHashMap<String, Entry> found = new LinkedHashMap<>();
        long endSeen = DATA_HEADER_SIZE;
        if (idSums.size() > blocks.size() + 1) {
            throw new CorruptFileException(metaPath, 4, "at most one id past the " + blocks.size()
                + " committed meta blocks (" + metaSumsPath + ")", idSums.size()
                + " checksummed ids (meta lost blocks; open with salvage=True to cut them anyway)");
        }
        for (int index = 0; index < blocks.size(); index++) {
            Object[] b = blocks.get(index);
            String pid = (String) b[0];
            long first = (Long) b[1];
            long last = (Long) b[2];
            long highest = (Long) b[3];
            long at = (Long) b[4];
            byte[] rawId = pid.getBytes(StandardCharsets.UTF_8);
            long firstSeq = highest + 1;
            long[] summed = index < idSums.size() ? idSums.get(index) : null;
            if (summed != null && idCrc(rawId, summed[0]) != summed[1]) {
                throw new CorruptFileException(metaPath, at, "a meta block matching its checksum "
                    + Py.hex8(summed[1]) + " in " + metaSumsPath, "checksum " + Py.hex8(idCrc(rawId, summed[0]))
                    + " (id " + Py.repr(pid) + ", first live sequence number " + summed[0] + ")");
            }
            if (last == 0) {
                if (first != 0) {
                    throw new CorruptFileException(metaPath, at + 2, "first offset 0 when the last offset is 0",
                        Long.toString(first));
                }
                if (summed != null && summed[0] != firstSeq) {
                    throw new CorruptFileException(metaPath, at + 2, "first live sequence number " + summed[0]
                        + " of " + Py.repr(pid) + " (" + metaSumsPath + ")", "no blocks and highest " + highest);
                }
            } else {
                long[] lastH = reader.header(last);
                if (lastH[4] != highest) {
                    throw new CorruptFileException(dataPath, last, "sequence number " + highest
                        + " (meta's highest for " + Py.repr(pid) + ")", Long.toString(lastH[4]));
                }
                long[] tip = lastH;
                boolean grown = false;
                while (tip[3] > tip[1]) {  // roll forward: follow next while it leads to the id's next block
                    long[] nxt;
                    try {
                        nxt = reader.header(tip[3]);
                    } catch (CorruptFileException e) {
                        break;
                    }
                    if (nxt[2] != tip[1] || nxt[4] != tip[4] + 1 || nxt[1] + nxt[0] > dataSize) {
                        break;
                    }
                    tip = nxt;
                    grown = true;
                }
                firstSeq = tip[4] + 1;
                if (first != 0) {
                    try {
                        long[] f = reader.header(first);
                        if (!(1 <= f[4] && f[4] <= tip[4])) {
                            throw new CorruptFileException(dataPath, first, "a sequence number in [1, " + tip[4]
                                + "] for " + Py.repr(pid), Long.toString(f[4]));
                        }
                        firstSeq = f[4];
                    } catch (CorruptFileException e) {
                        if (summed == null) {
                            throw e;
                        }
                        firstSeq = -1;
                    }
                }
                if (grown) {
                    if (first == 0) {
                        firstSeq = lastH[4] + 1;
                    }
                    first = first != 0 ? first : lastH[3];
                    last = tip[1];
                    highest = tip[4];
                }
                endSeen = Math.max(endSeen, tip[1] + tip[0]);
                if (summed != null && summed[0] != firstSeq) {
                    first = firstBlock(reader, tip, summed[0], pid, at);
                    firstSeq = summed[0];
                }
            }
            found.put(pid, new Entry(pid, first, last, highest, firstSeq));
        }
        if (dataSize < endSeen) {
            throw new CorruptFileException(dataPath, dataSize, "data up to the end of the last blocks, " + endSeen,
                "end of file");
        }
        this.end = endSeen;
        loadDataSums();
        this.entries = found;
        this.window = new byte[0];
        this.windowLen = 0;
    }

    /** {@code recovery._first_block}: the block numbered {@code firstSeq}, walking back from the tip. */
    private long firstBlock(HeaderReader reader, long[] tip, long firstSeq, String pid, long at) {
        if (firstSeq == tip[4] + 1) {
            return 0;
        }
        if (!(1 <= firstSeq && firstSeq <= tip[4])) {
            throw new CorruptFileException(metaPath, at, "a first live sequence number in [1, " + (tip[4] + 1)
                + "] for " + Py.repr(pid) + " (meta.crc)", Long.toString(firstSeq));
        }
        long[] h = tip;
        while (h[4] > firstSeq) {
            long[] prev = reader.header(h[2]);
            if (prev[3] != h[1] || prev[4] != h[4] - 1) {
                throw new CorruptFileException(dataPath, prev[1], "next " + h[1] + " and sequence number " + (h[4] - 1),
                    "next " + prev[3] + " and sequence number " + prev[4]);
            }
            h = prev;
        }
        return h[1];
    }

    /** {@code codec.decode_meta_header}: the blocks' size. */
    private long decodeMetaHeader(byte[] head) {
        if (head.length < META_HEADER_SIZE) {
            byte[] m = java.util.Arrays.copyOf(head, Math.min(4, head.length));
            if (head.length > 0 && !Py.startsWith("APFM", m) && !Py.startsWith("AKFM", m)) {
                throw new CorruptFileException(metaPath, 0, "meta magic APFM or AKFM", Py.repr(m), true);
            }
            throw new CorruptFileException(metaPath, head.length, "an 8-byte meta header", head.length
                + " bytes (file truncated)");
        }
        String magic = new String(head, 0, 4, StandardCharsets.ISO_8859_1);
        if (!magic.equals("APFM") && !magic.equals("AKFM")) {
            throw new CorruptFileException(metaPath, 0, "meta magic APFM or AKFM",
                Py.repr(java.util.Arrays.copyOf(head, 4)), true);
        }
        int size = i32(head, 4);
        if (size < 0) {
            throw new CorruptFileException(metaPath, 4, "a non-negative meta size", Integer.toString(size));
        }
        return size;
    }

    /** {@code codec.decode_meta_blocks}: (id, first, last, highest, meta offset) per block. */
    private List<Object[]> decodeMetaBlocks(byte[] meta, int committed) {
        List<Object[]> out = new ArrayList<>();
        java.util.Set<String> seen = new java.util.HashSet<>();
        int pos = META_HEADER_SIZE;
        while (pos < committed) {
            int left = committed - pos;
            if (left < META_BLOCK_FIXED_SIZE) {
                throw new CorruptFileException(metaPath, pos, "a 26-byte meta block header", left + " bytes left");
            }
            int size = (short) (((meta[pos] & 0xFF) << 8) | (meta[pos + 1] & 0xFF));
            long first = i64(meta, pos + 2);
            long last = i64(meta, pos + 10);
            long highest = i64(meta, pos + 18);
            if (size <= META_BLOCK_FIXED_SIZE) {
                throw new CorruptFileException(metaPath, pos, "a meta block size > 26", Integer.toString(size));
            }
            if (size > left) {
                throw new CorruptFileException(metaPath, pos, "a meta block of " + size + " bytes", left + " bytes left");
            }
            String pid = Py.utf8(meta, pos + META_BLOCK_FIXED_SIZE, size - META_BLOCK_FIXED_SIZE, metaPath,
                pos + META_BLOCK_FIXED_SIZE);
            if (seen.contains(pid)) {
                throw new CorruptFileException(metaPath, pos, "each persistence id once", Py.repr(pid) + " again");
            }
            if (first < 0 || last < 0 || highest < 0) {
                throw new CorruptFileException(metaPath, pos + 2, "non-negative offsets and sequence number",
                    "first=" + first + " last=" + last + " highest=" + highest);
            }
            seen.add(pid);
            out.add(new Object[] {pid, first, last, highest, (long) pos});
            pos += size;
        }
        return out;
    }

    /** {@code codec.decode_data_header}. */
    private void decodeDataHeader(byte[] head) {
        if (head.length < DATA_HEADER_SIZE) {
            byte[] m = java.util.Arrays.copyOf(head, Math.min(4, head.length));
            if (head.length > 0 && !Py.startsWith("AKFD", m)) {
                throw new CorruptFileException(dataPath, 0, "data magic AKFD", Py.repr(m), true);
            }
            throw new CorruptFileException(dataPath, head.length, "an 8-byte data header", head.length
                + " bytes (file truncated)");
        }
        if (!new String(head, 0, 4, StandardCharsets.ISO_8859_1).equals("AKFD")) {
            throw new CorruptFileException(dataPath, 0, "data magic AKFD", Py.repr(java.util.Arrays.copyOf(head, 4)),
                true);
        }
        int length = i32(head, 4);
        if (length < 0) {
            throw new CorruptFileException(dataPath, 4, "a non-negative data length", Integer.toString(length));
        }
    }

    /** {@code sumfiles._open} for a reader: the side file's bytes, or null when there is none. */
    private byte[] sideFile(String path, String magic, byte[] initial) {
        if (!fs.exists(path)) {
            return null;
        }
        byte[] head = fs.readAt(path, 0, initial.length);
        boolean ok = head.length >= SUMS_HEADER_SIZE
            && new String(head, 0, 4, StandardCharsets.ISO_8859_1).equals(magic) && i32(head, 4) == 1;
        if (!ok || head.length < initial.length) {
            boolean prefix = head.length < initial.length
                && java.util.Arrays.equals(head, java.util.Arrays.copyOf(initial, head.length));
            if (prefix) {
                return head;  // a side file being created: no entries
            }
            throw new CorruptFileException(path, 0, "a " + magic + " version 1 checksum file",
                Py.hex(java.util.Arrays.copyOf(head, Math.min(12, head.length))), true);
        }
        return fs.readAll(path);
    }

    /** {@code MetaSums.reload}: (first live sequence number, crc) per meta block. */
    private List<long[]> readMetaSums() {
        byte[] initial = {'E', 'J', 'M', 'C', 0, 0, 0, 1};
        byte[] raw = sideFile(metaSumsPath, "EJMC", initial);
        List<long[]> out = new ArrayList<>();
        if (raw == null) {
            return out;
        }
        for (int pos = SUMS_HEADER_SIZE; pos + SUM_ENTRY_SIZE <= raw.length; pos += SUM_ENTRY_SIZE) {
            out.add(new long[] {i64(raw, pos), i32(raw, pos + 8) & 0xFFFFFFFFL});
        }
        return out;
    }

    /** {@code sumfiles.load_data_sums} for a reader ({@code DataSums.parse} with {@code limit = end}). */
    private void loadDataSums() {
        byte[] initial = {'E', 'J', 'D', 'C', 0, 0, 0, 1, 0, 0, 0, 0};
        byte[] raw = sideFile(dataSumsPath, "EJDC", initial);
        dataSums = raw != null;
        failures.clear();
        int cap = raw == null ? 0 : Math.max(0, (raw.length - DATA_SUMS_HEADER_SIZE) / SUM_ENTRY_SIZE);
        ends = new long[cap];
        lasts = new long[cap];
        crcs = new long[cap];
        sumCount = 0;
        if (raw == null) {
            checked = new byte[0];
            if (end > DATA_HEADER_SIZE) {
                LOG.warn("event journal {} has no {}: its blocks are not checked against checksums (open it once "
                    + "with a writer to add them)", dataPath, dataSumsPath);
            }
            return;
        }
        long synced = raw.length >= DATA_SUMS_HEADER_SIZE ? i32(raw, 8) : 0;
        int pos = DATA_SUMS_HEADER_SIZE;
        long start = DATA_HEADER_SIZE;
        while (pos + SUM_ENTRY_SIZE <= raw.length) {
            int index = sumCount;
            long e = i32(raw, pos);
            long last = i32(raw, pos + 4);
            long crc = i32(raw, pos + 8) & 0xFFFFFFFFL;
            boolean shaped = start <= last && last <= e - 24;
            if (!shaped || e > end) {
                if (index >= synced || (e > end && shaped)) {
                    break;
                }
                throw new CorruptFileException(dataSumsPath, pos, "entry " + index + " (of " + synced
                    + " synced) of a batch starting at " + start + ", ending by " + end
                    + " (the committed end of data)", "end " + e + ", last " + last);
            }
            ends[sumCount] = e;
            lasts[sumCount] = last;
            crcs[sumCount] = crc;
            sumCount++;
            start = e;
            pos += SUM_ENTRY_SIZE;
        }
        checked = new byte[sumCount];
        long covered = sumCount > 0 ? ends[sumCount - 1] : DATA_HEADER_SIZE;
        if (covered < end) {
            LOG.warn("event journal {}: {} committed bytes of data past offset {} have no checksum in {} (a writer "
                + "crashed before syncing them; a writer's open rebuilds them)", dataPath, end - covered, covered,
                dataSumsPath);
        }
    }

    static long idCrc(byte[] rawId, long firstSeq) {
        CRC32 c = new CRC32();
        int size = META_BLOCK_FIXED_SIZE + rawId.length;
        byte[] fixed = new byte[10];
        fixed[0] = (byte) (size >> 8);
        fixed[1] = (byte) size;
        for (int i = 0; i < 8; i++) {
            fixed[2 + i] = (byte) (firstSeq >>> (56 - 8 * i));
        }
        c.update(fixed);
        c.update(rawId);
        return c.getValue();
    }

    // -- block headers (engine.events.blocks.BlockReader) ---------------------------------------

    /** {@code BlockReader}: validated headers {size, offset, previous, next, seq} below {@code limit}. */
    private final class HeaderReader {
        private final long limit;

        HeaderReader(long limit) {
            this.limit = limit;
        }

        long[] header(long offset) {
            if (offset < DATA_HEADER_SIZE || offset + BLOCK_HEADER_SIZE > limit) {
                throw new CorruptFileException(dataPath, offset, "a block link inside [8, " + limit + ")",
                    Long.toString(offset));
            }
            int at = ensure(offset, BLOCK_HEADER_SIZE, 4096, limit);
            if (at < 0) {
                throw new CorruptFileException(dataPath, offset, "a 24-byte block header", "end of file");
            }
            long size = i32(window, at);
            long own = i32(window, at + 4);
            long previous = i32(window, at + 8);
            long next = i32(window, at + 12);
            long seq = i64(window, at + 16);
            if (own != offset) {
                throw new CorruptFileException(dataPath, offset, "a block whose own-offset field is " + offset,
                    Long.toString(own));
            }
            if (size < BLOCK_HEADER_SIZE || offset + size > limit) {
                throw new CorruptFileException(dataPath, offset, "a block size in [24, " + (limit - offset) + "]",
                    Long.toString(size));
            }
            if (previous < 0 || next < 0) {
                throw new CorruptFileException(dataPath, offset, "non-negative links", "previous=" + previous
                    + " next=" + next);
            }
            return new long[] {size, own, previous, next, seq};
        }
    }

    /**
     * Makes the window hold {@code [offset, offset + length)} (reading {@code max(length, readahead)}
     * bytes, never past {@code limit}); returns the index of {@code offset} in it, or -1 when the file
     * ends first.
     */
    private int ensure(long offset, int length, int readahead, long limit) {
        if (windowStart <= offset && offset + length <= windowStart + windowLen) {
            return (int) (offset - windowStart);
        }
        long want = Math.min(Math.max(length, readahead), limit - offset);
        want = Math.min(want, Math.max(0, dataSize - offset));
        if (window.length < want) {
            window = new byte[(int) Math.max(want, Math.min(2L * window.length, Integer.MAX_VALUE - 8))];
        }
        windowStart = offset;
        windowLen = fs.readInto(dataPath, offset, window, (int) want, dataSize);
        return windowLen >= length ? 0 : -1;
    }

    // -- replay ---------------------------------------------------------------------------------

    /** Where a replay is: the block to decode next, its sequence number and previous link. */
    static final class Cursor {
        long offset;
        long prev;
        long expected;
        long hi;
        boolean done;
    }

    /**
     * {@code EventView.replay(pid, fromSeq, toSeq)}: a cursor over the id's events with
     * {@code fromSeq <= sequence_nr <= toSeq} ({@code toSeq < 0}: no upper bound), read with
     * {@link #step}.  A start past the first live block is found now (a broken link raises here).
     */
    Cursor start(Entry e, long fromSeq, long toSeq) {
        Cursor c = new Cursor();
        c.done = true;
        if (e == null || e.first == 0) {
            return c;
        }
        long lo = Math.max(fromSeq, e.firstSeq);
        long hi = toSeq < 0 ? e.highest : Math.min(toSeq, e.highest);
        if (lo > hi) {
            return c;
        }
        if (lo != e.firstSeq) {
            long[] found = locate(e, lo);
            c.offset = found[1];
            c.prev = found[2];
        } else {
            c.offset = e.first;
            c.prev = ANY_PREVIOUS;
        }
        c.expected = lo;
        c.hi = hi;
        c.done = false;
        return c;
    }

    /** Every event of {@code start(e, fromSeq, toSeq)} to {@code sink} (the parity dump's replay). */
    void replay(Entry e, long fromSeq, long toSeq, EventSink sink) {
        Cursor c = start(e, fromSeq, toSeq);
        while (!c.done) {
            step(c, sink, Integer.MAX_VALUE);
        }
    }

    /** {@code blocks.locate}: the block numbered {@code lo}, walking from the nearer end. */
    private long[] locate(Entry e, long lo) {
        HeaderReader reader = new HeaderReader(end);
        long offset;
        long[] h;
        if (lo - e.firstSeq <= e.highest - lo) {
            offset = e.first;
            h = reader.header(offset);
            while (h[4] < lo) {
                if (offset == e.last) {
                    throw new CorruptFileException(dataPath, offset, "a link onward to sequence number " + lo,
                        "the last block");
                }
                long nxt = h[3];
                long expected = h[4] + 1;
                h = reader.header(nxt);
                if (h[4] != expected || h[2] != offset) {
                    throw new CorruptFileException(dataPath, nxt, "sequence number " + expected + " linked back to "
                        + offset, h[4] + " linked back to " + h[2]);
                }
                offset = nxt;
            }
        } else {
            offset = e.last;
            h = reader.header(offset);
            while (h[4] > lo) {
                long prv = h[2];
                long expected = h[4] - 1;
                h = reader.header(prv);
                if (h[4] != expected || h[3] != offset) {
                    throw new CorruptFileException(dataPath, prv, "sequence number " + expected + " linked to "
                        + offset, h[4] + " linked to " + h[3]);
                }
                offset = prv;
            }
        }
        if (h[4] != lo) {
            throw new CorruptFileException(dataPath, offset, "sequence number " + lo, Long.toString(h[4]));
        }
        return h;
    }

    /**
     * Up to {@code max} events from the cursor to {@code sink}, with {@code runs.walk_runs_py}'s
     * checks of each block and of the data.crc batch holding it; returns how many.
     */
    int step(Cursor c, EventSink sink, int max) {
        long limit = end;
        long covered = sumCount > 0 ? ends[sumCount - 1] : 0;
        int count = 0;
        while (!c.done && count < max) {
            long offset = c.offset;
            if (!(windowStart <= offset && offset + BLOCK_HEADER_SIZE <= windowStart + windowLen)) {
                readAhead(offset);  // a new window is needed: size it
            }
            if (dataSums && DATA_HEADER_SIZE <= offset && offset < covered) {
                checkBatch(batchOf(offset), offset);
            }
            if (offset < DATA_HEADER_SIZE || offset + BLOCK_HEADER_SIZE > limit) {
                throw new CorruptFileException(dataPath, offset, "a block link inside [8, " + limit + ")",
                    Long.toString(offset));
            }
            int at = ensure(offset, BLOCK_HEADER_SIZE, want, limit);
            if (at < 0) {
                throw new CorruptFileException(dataPath, offset, "a 24-byte block header", "end of file");
            }
            long size = i32(window, at);
            long own = i32(window, at + 4);
            long previous = i32(window, at + 8);
            long nxt = i32(window, at + 12);
            long seq = i64(window, at + 16);
            long prev = c.prev;
            if (own != offset || seq != c.expected || (previous != prev && prev != ANY_PREVIOUS) || size < 24
                || offset + size > limit) {
                throw new CorruptFileException(dataPath, offset, "block " + offset + ": own offset " + offset
                    + ", sequence number " + c.expected + ", previous "
                    + (prev == ANY_PREVIOUS ? "any" : Long.toString(prev)) + ", size in [24, " + (limit - offset) + "]",
                    "own offset " + own + ", sequence number " + seq + ", previous " + previous + ", size " + size);
            }
            at = ensure(offset, (int) size, want, limit);
            if (at < 0) {
                throw new CorruptFileException(dataPath, offset, size + " bytes of block", "end of file");
            }
            sink.event(seq, window, at + BLOCK_HEADER_SIZE, (int) size - BLOCK_HEADER_SIZE);
            served = offset + size;
            count++;
            if (seq >= c.hi) {
                c.done = true;
            }
            c.prev = offset;
            c.offset = nxt;
            c.expected = seq + 1;
        }
        return count;
    }

    /**
     * The size of the window to read at {@code offset} when the current one does not hold the
     * block (the Python walker's rule): a batch's blocks are adjacent, another id's are not, so
     * when the chain runs on past the window the next is twice what the window served, and when
     * it jumps elsewhere as much as it served (runs tend to be alike); at most {@link #READAHEAD}.
     */
    private void readAhead(long offset) {
        long used = served - windowStart;
        if (windowLen > 0 && used > 0 && used <= windowLen) {
            long grow = offset == served ? 2 * used : used;
            want = (int) Math.max(MIN_WINDOW, Math.min(grow, READAHEAD));
        }
    }

    /** Index of the data.crc batch holding {@code offset} ({@code bisect_right(ends, offset)}). */
    private int batchOf(long offset) {
        int lo = 0;
        int hi = sumCount;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (ends[mid] <= offset) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    /** The data.crc check of batch {@code k}, once per snapshot ({@code DataSums.failure}'s words). */
    private void checkBatch(int k, long offset) {
        if (checked[k] == 1) {
            return;
        }
        long s = k > 0 ? ends[k - 1] : DATA_HEADER_SIZE;
        long e = ends[k];
        if (checked[k] == 2) {
            CorruptFileException known = failures.get(k);
            throw known != null ? known : new CorruptFileException(dataPath, s, "bytes matching their checksum "
                + Py.hex8(crcs[k]) + " (" + dataSumsPath + " entry " + k + ", batch [" + s + ", " + e + "))",
                "a checksum failure");
        }
        int n = (int) (e - s);
        // One read serves the check and the blocks after it: the window starts at the batch
        // (whose blocks are usually this id's run) and reaches at least its end.
        int at = ensure(s, n, (int) Math.max(n, offset - s + want), end);
        if (at < 0) {
            throw new CorruptFileException(dataPath, s, n + " bytes of checksummed batches", "end of file");
        }
        int next = at + (int) (lasts[k] - s) + BLOCK_NEXT_FIELD;
        CRC32 c = new CRC32();
        c.update(window, at, next - at);
        c.update(window, next + 4, at + n - next - 4);
        long crc = c.getValue();
        if (crc != crcs[k]) {
            CorruptFileException error = new CorruptFileException(dataPath, s, "bytes matching their checksum "
                + Py.hex8(crcs[k]) + " (" + dataSumsPath + " entry " + k + ", batch [" + s + ", " + e + "))",
                "checksum " + Py.hex8(crc));
            failures.put(k, error);
            checked[k] = 2;
            throw error;
        }
        checked[k] = 1;
    }

    static int i32(byte[] b, int at) {
        return ((b[at] & 0xFF) << 24) | ((b[at + 1] & 0xFF) << 16) | ((b[at + 2] & 0xFF) << 8) | (b[at + 3] & 0xFF);
    }

    static long i64(byte[] b, int at) {
        return ((long) i32(b, at) << 32) | (i32(b, at + 4) & 0xFFFFFFFFL);
    }
}
