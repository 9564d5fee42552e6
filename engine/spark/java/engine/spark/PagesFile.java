package engine.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;

/**
 * The JVM reader of a page store (ENGPAGES, {@code docs/formats/pagestore.md}) as
 * {@code engine.pages.PageReader} reads it for {@code engine-pages}: the header (magic, CRC,
 * version, page size, free-list head), the open's checks (a FLUSHING mark, a JOURNAL_LIVE store
 * without its journal, a JRNL journal holding transactions no live writer applies), the store
 * size, the free list (range and cycle checks), the {@code -sums} page checksums (ENGSUMS1 zlib
 * CRC-32, ENGSUMS2 CRC-32C) and every page read checked against its entry
 * ({@code sums.check_read}).  Errors are the Python ones, word for word.
 *
 * <p>A Python reader holds the store file's shared {@code flock} while it reads; the JVM cannot
 * take a flock ({@link java.nio.channels.FileLock} is an fcntl lock, which a flock ignores).  So a
 * read here is optimistic, a seqlock over the store's change count ({@link StoreGate}): a unit
 * of work that must be consistent (a batch of a partition) is read between {@link #begin} and
 * {@link #stands}, and read again, from the state loaded anew, when the count moved in between.
 * Where the store has no count (no gate: a writer of an older version, or a path that is not a
 * local file) {@link #stands} falls back to {@link #unchanged}: the store file as it was when the
 * state was loaded (header bytes, modification time, size), which can miss a change within one
 * modification-time tick.  A FLUSHING mark with the store's flock held by a writer is a flush in
 * progress, waited for, not damage.
 */
final class PagesFile {
    static final byte[] MAGIC = "ENGPAGES".getBytes(StandardCharsets.US_ASCII);
    static final int HEADER_SIZE = 40;
    static final int FLUSHING = 0x1;
    static final int JOURNAL_LIVE = 0x2;
    static final int SUMS_HEADER_SIZE = 16;
    static final int JRNL_HEADER_SIZE = 20;

    final Hfs fs;
    final String path;
    int pageSize;
    long pageCount;
    long freeHead;
    int flags;
    /** What {@link #load} saw: header bytes, modification time (ns), size. */
    private byte[] keyHeader;
    private long keyTime;
    private long size;
    /** The free pages in list order, and as a set. */
    long[] freeOrder = new long[0];
    Set<Long> free = new HashSet<>();
    /** Checksums of pages {@code sumsFrom ..}, {@code sums[page - sumsFrom]}; null: no sums file. */
    private int[] sums;
    private long sumsFrom;
    /** How many entries the sums file holds (pages 1..sumsEntries have one). */
    private long sumsEntries;
    private boolean crc32c;
    /** The store file's channel when it is local (opened by the first read). */
    private java.nio.channels.FileChannel channel;
    /** The free pages' checksums, both kinds, computed while the list was walked (load's checks). */
    private int[] freeCrc;
    private int[] freeCrc32c;
    /** The store's change count (null: none yet, looked for again at each {@link #begin}). */
    private StoreGate gate;
    /** The change count the state loaded was read under and stood at ({@link StoreGate#NONE}: none). */
    private long validAt = StoreGate.NONE;

    private PagesFile(Hfs fs, String path) {
        this.fs = fs;
        this.path = path;
    }

    /** {@code engine.spark.pagesource} store name: the path's last component. */
    static String storeName(String path) {
        String p = path;
        while (p.endsWith("/")) {
            p = p.substring(0, p.length() - 1);
        }
        return p.substring(p.lastIndexOf('/') + 1);
    }

    private static long u64(byte[] b, int at) {
        return ByteBuffer.wrap(b, at, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
    }

    private static long u32(byte[] b, int at) {
        return ByteBuffer.wrap(b, at, 4).order(ByteOrder.LITTLE_ENDIAN).getInt() & 0xFFFFFFFFL;
    }

    private static int u16(byte[] b, int at) {
        return (b[at] & 0xFF) | (b[at + 1] & 0xFF) << 8;
    }

    private static long crc32(byte[] b, int at, int n) {
        CRC32 c = new CRC32();
        c.update(b, at, n);
        return c.getValue();
    }

    /** {@code storefile.read_header_bytes}: {@code store_codec.decode_header} with the path. */
    private void decodeHeader(byte[] raw) {
        if (raw.length < HEADER_SIZE) {
            throw new CorruptFileException(path, 0, HEADER_SIZE + "-byte header", raw.length + " bytes");
        }
        if (!Arrays.equals(Arrays.copyOf(raw, 8), MAGIC)) {
            throw new CorruptFileException(path, 0, "magic b'ENGPAGES'", Py.repr(Arrays.copyOf(raw, 8)), true);
        }
        if (crc32(raw, 0, 36) != u32(raw, 36)) {
            throw new CorruptFileException(path, 0, "header CRC to match", null);
        }
        int version = u16(raw, 8);
        if (version != 1) {
            throw new CorruptFileException(path, 0, "version 1", Integer.toString(version), true);
        }
        long ps = u32(raw, 12);
        if (ps < 512 || ps > 65536 || (ps & (ps - 1)) != 0) {
            throw new CorruptFileException(path, 0, "a page size that is a power of two in 512..65536",
                Long.toString(ps));
        }
        long count = u64(raw, 16);
        long head = u64(raw, 24);
        if (head != 0 && (Long.remainderUnsigned(head, ps) != 0 || !inside(Long.divideUnsigned(head, ps), count))) {
            throw new CorruptFileException(path, 0, "a free-list head inside pages 1.." + Long.toUnsignedString(count),
                "offset " + Long.toUnsignedString(head));
        }
        pageSize = (int) ps;
        pageCount = count;
        freeHead = head;
        flags = (int) u32(raw, 32);
    }

    /** 1 <= page <= count, both unsigned u64 (as Python's integers). */
    private static boolean inside(long page, long count) {
        return page != 0 && Long.compareUnsigned(page, count) <= 0;
    }

    private byte[] headerBytes() {
        byte[] raw = new byte[HEADER_SIZE];
        int n = read(0, raw, HEADER_SIZE, Long.MAX_VALUE);
        return n == HEADER_SIZE ? raw : Arrays.copyOf(raw, n);
    }

    /**
     * Up to {@code len} bytes of the store file at {@code offset} into {@code out} (as far as
     * {@code limit}, the file size known, and the file go); how many were read.  A local file is
     * read with positioned reads of one channel (one system call each, no stream buffer), any
     * other through {@link Hfs}.
     */
    private int read(long offset, byte[] out, int len, long limit) {
        java.nio.file.Path local = channel == null ? fs.localPath(path) : null;
        if (channel == null && local != null) {
            try {
                channel = java.nio.channels.FileChannel.open(local, java.nio.file.StandardOpenOption.READ);
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        if (channel == null) {
            return fs.readInto(path, offset, out, len, limit == Long.MAX_VALUE ? fs.size(path) : limit);
        }
        int want = (int) Math.max(0, Math.min(len, limit - offset));
        ByteBuffer b = ByteBuffer.wrap(out, 0, want);
        try {
            while (b.hasRemaining()) {
                int n = channel.read(b, offset + b.position());
                if (n < 0) {
                    break;
                }
            }
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        return b.position();
    }

    /** Closes the channel {@link #read} opened (a reader that is done). */
    void close() {
        if (channel != null) {
            try {
                channel.close();
            } catch (IOException e) {
                // a read-only channel: nothing to lose
            }
            channel = null;
        }
    }

    /** {@code reader._read_header}: decoded, FLUSHING refused (or, with a writer's flock held, waited for). */
    private byte[] readHeader() {
        for (int attempt = 0; ; attempt++) {
            if (gate == null) {
                gate = StoreGate.open(fs, path);
            }
            long before = gate == null ? StoreGate.NONE : gate.count();
            byte[] raw = headerBytes();
            decodeHeader(raw);
            if ((flags & FLUSHING) == 0) {
                return raw;
            }
            // The mark with no writer holding the lock is a writer's death, unless the change
            // count moved by the time the lock was looked for (loaded after that look): the
            // writer that wrote it let go between the two looks.  (Without a count that race
            // reads as a death, as before the count existed.)
            if (attempt >= 2000 || !flockHeld(fs, path, true) && (gate == null || gate.count() == before)) {
                throw new RecoveryNeededException(path + ": a writer stopped while writing pages into the store file; "
                    + "open the store for writing once to finish from its journal (nothing committed is lost)");
            }
            pause();  // a live writer is flushing: it clears the mark when its pages are written
        }
    }

    /**
     * The start of a read that must see one state of the store file: the change count to
     * compare with at its end ({@link #stands}), an even one (waited for while a writer
     * writes); {@link StoreGate#NONE} when the store has no count.
     */
    long begin() {
        if (gate == null) {
            gate = StoreGate.open(fs, path);
        }
        return gate == null ? StoreGate.NONE : gate.settled(fs, path);
    }

    /**
     * The end of a read {@link #begin} started: whether what was read is one state of the store
     * file (the change count still {@code seen}; without a count, {@link #unchanged}).  False:
     * the read is discarded and made again.
     */
    boolean stands(long seen) {
        return seen == StoreGate.NONE ? unchanged() : gate.count() == seen;
    }

    /** After a read under {@code seen} that {@link #stands}: the state loaded is that of {@code seen}. */
    void stood(long seen) {
        validAt = seen;
    }

    /**
     * Whether the state loaded (header, free list, checksums) is the store file's at count
     * {@code seen}, so a read under it needs no reload (without a count: {@link #unchanged}).
     */
    boolean current(long seen) {
        return seen == StoreGate.NONE ? keyHeader != null && unchanged() : validAt == seen;
    }

    /** The state loaded is no longer known to be any count's (a reload begins). */
    void forget() {
        validAt = StoreGate.NONE;
    }

    /** Between two tries of a read that raced a writer: 1 ms, doubling up to 50 ms. */
    static void backoff(int attempt) {
        try {
            Thread.sleep(Math.min(50, 1L << Math.min(attempt, 6)));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for a page store's writer", e);
        }
    }

    static void pause() {
        try {
            Thread.sleep(5);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for a page store's writer", e);
        }
    }

    /**
     * {@code PageReader.open}'s checks: the header, FLUSHING, the journal's presence when the
     * header says a writer had it open, and a journal holding transactions with no live writer.
     */
    static PagesFile open(Hfs fs, String path) {
        PagesFile f = new PagesFile(fs, path);
        try {
            return f.opened();
        } catch (RuntimeException e) {
            f.close();
            throw e;
        }
    }

    private PagesFile opened() {
        if (fs.size(path) < 0) {
            throw new java.io.UncheckedIOException(new java.io.FileNotFoundException(path));
        }
        readHeader();
        String jpath = path + "-journal";
        if (!present(fs, jpath, "the page store's JRNL journal file")) {
            if ((flags & JOURNAL_LIVE) != 0) {
                throw new CorruptFileException(jpath, 0, "the JRNL journal of " + path + " (its header flags say a "
                    + "writer had it open, so commits may be only in it)",
                    "no file: it was deleted or moved; put it back (or restore a backup) before opening the store");
            }
            return this;
        }
        byte[] raw = fs.readAt(jpath, 0, JRNL_HEADER_SIZE);
        if (raw.length < JRNL_HEADER_SIZE || raw[0] != 'J' || raw[1] != 'R' || raw[2] != 'N' || raw[3] != 'L') {
            StringBuilder hex = new StringBuilder();
            for (int i = 0; i < Math.min(4, raw.length); i++) {
                hex.append(i > 0 ? " " : "").append(String.format("%02x", raw[i] & 0xFF));
            }
            throw new CorruptFileException(jpath, 0, "a JRNL header", hex.toString(), true);
        }
        if (u64(raw, 4) != 0 && !flockHeld(fs, jpath, true)) {
            throw new RecoveryNeededException(jpath + ": holds committed transactions not yet in the store file (its "
                + "writer did not close it); open the store for writing once to apply them (nothing is lost)");
        }
        return this;
    }

    /** {@code PageReader.page_count}: the header read again. */
    long pageCount() {
        readHeader();
        return pageCount;
    }

    /**
     * {@code PageReader._refresh}: header, store size, free list and checksums loaded; then
     * {@code pagesource.check_free_pages}: every free page checked against its checksum.
     */
    void load() {
        load(true);
    }

    /**
     * {@link #load()}; {@code checkFree}: the free pages checked too (what the engine-pages
     * source adds to a reader's refresh; a key-value reader checks the pages it reads only).
     */
    void load(boolean checkFree) {
        forget();
        long time = mtime();
        byte[] raw = readHeader();
        long have = fs.size(path);
        // The file as this load starts: what unchanged() compares with, even when a check fails.
        keyHeader = raw;
        keyTime = time;
        size = have;
        java.math.BigInteger need = new java.math.BigInteger(Long.toUnsignedString(pageCount)).add(
            java.math.BigInteger.ONE).multiply(java.math.BigInteger.valueOf(pageSize));
        if (java.math.BigInteger.valueOf(have).compareTo(need) < 0) {
            throw new CorruptFileException(path, have, need + " bytes for " + Long.toUnsignedString(pageCount)
                + " pages", Long.toString(have));
        }
        walkFreeList(checkFree);
        loadSums();
        if (!checkFree || sums == null) {
            return;
        }
        // check_free_pages: each free page against its sum, in list order (read by the walk).
        for (int i = 0; i < freeOrder.length; i++) {
            long p = freeOrder[i];
            if (p <= sumsEntries && (crc32c ? freeCrc32c[i] : freeCrc[i]) != sums[(int) (p - sumsFrom)]) {
                throw new CorruptFileException(path, p * pageSize, "page " + p + " matching its checksum",
                    "a different CRC (damaged)");
            }
        }
    }

    /** Whether the store file is as {@link #load} saw it (header bytes, modification time, size). */
    boolean unchanged() {
        return keyHeader != null && Arrays.equals(headerBytes(), keyHeader) && mtime() == keyTime
            && currentSize() == size;
    }

    /** The store file's size now (through the channel {@link #read} keeps, when local: no Hadoop status). */
    private long currentSize() {
        if (channel != null) {
            try {
                return channel.size();
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return fs.size(path);
    }

    private long mtime() {
        Path local = fs.localPath(path);
        if (local == null) {
            return 0;  // no engine writer runs on another Hadoop file system (it needs a local POSIX one)
        }
        try {
            return Files.getLastModifiedTime(local).to(java.util.concurrent.TimeUnit.NANOSECONDS);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** {@code recovery.walk_free_list}: head first; a link out of range or a cycle is damage. */
    private void walkFreeList(boolean sumsToo) {
        long ps = pageSize;
        Set<Long> seen = new HashSet<>();
        long[] order = new long[16];
        int n = 0;
        long off = freeHead;
        long linkAt = 24;
        byte[] link = new byte[sumsToo ? pageSize : 8];
        int[] crcs = new int[16];
        int[] crcs32c = new int[16];
        while (off != 0) {
            long page = Long.divideUnsigned(off, ps);
            if (Long.remainderUnsigned(off, ps) != 0 || !inside(page, pageCount)) {
                throw new CorruptFileException(path, linkAt, "a free page offset inside the store (it has "
                    + pageRange(pageCount) + ")", Long.toUnsignedString(off));
            }
            if (!seen.add(page)) {
                throw new CorruptFileException(path, linkAt, "a free list without a cycle", "page " + page + " twice");
            }
            if (n == order.length) {
                order = Arrays.copyOf(order, n * 2);
                crcs = Arrays.copyOf(crcs, n * 2);
                crcs32c = Arrays.copyOf(crcs32c, n * 2);
            }
            int got = read(off, link, link.length, size);
            if (got < 8) {
                throw new CorruptFileException(path, off, "a free page link", got + " bytes (file cut short)");
            }
            if (sumsToo) {
                // (the size check made every page whole: the page's sums, for the checks after the walk)
                crcs[n] = (int) crc32(link, 0, pageSize);
                CRC32C c = new CRC32C();
                c.update(link, 0, pageSize);
                crcs32c[n] = (int) c.getValue();
            }
            order[n++] = page;
            linkAt = off;
            off = u64(link, 0);
        }
        freeOrder = Arrays.copyOf(order, n);
        freeCrc = crcs;
        freeCrc32c = crcs32c;
        free = seen;
    }

    /** {@code recovery.page_range}. */
    static String pageRange(long count) {
        if (count == 0) {
            return "no pages yet";
        }
        return count == 1 ? "page 1 only" : "pages 1 to " + count;
    }

    /** {@code sums.load_present}: none without the file; damage when it is there but unusable. */
    private void loadSums() {
        loadSums(1, Long.MAX_VALUE);
    }

    /** {@link #loadSums()} keeping the entries of pages {@code [lo, hi)} only (the header checked as ever). */
    private void loadSums(long lo, long hi) {
        String spath = path + "-sums";
        sums = null;
        if (!present(fs, spath, "the page checksum file")) {
            return;
        }
        long fileSize = fs.size(spath);
        byte[] raw = fs.readAt(spath, 0, SUMS_HEADER_SIZE);
        boolean ok = raw.length >= SUMS_HEADER_SIZE && crc32(raw, 0, 12) == u32(raw, 12);
        String magic = ok ? new String(raw, 0, 8, StandardCharsets.ISO_8859_1) : "";
        ok = ok && (magic.equals("ENGSUMS1") || magic.equals("ENGSUMS2")) && u32(raw, 8) == pageSize;
        if (!ok) {
            throw new CorruptFileException(spath, 0, "an ENGSUMS header for " + pageSize + "-byte pages",
                "a damaged or foreign header (the next writable open rebuilds the file from the store)");
        }
        crc32c = magic.equals("ENGSUMS2");
        sumsEntries = Math.max(0, (fileSize - SUMS_HEADER_SIZE) / 4);
        sumsFrom = Math.max(1, lo);
        long last = Math.min(sumsEntries, hi - 1);  // the last page kept
        int n = (int) Math.max(0, last - sumsFrom + 1);
        byte[] body = fs.readAt(spath, SUMS_HEADER_SIZE + 4 * (sumsFrom - 1), 4 * n);
        n = body.length / 4;
        sumsEntries = Math.min(sumsEntries, sumsFrom - 1 + n);  // (a file cut meanwhile: fewer)
        sums = new int[n];
        ByteBuffer b = ByteBuffer.wrap(body, 0, 4 * n).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < n; i++) {
            sums[i] = b.getInt();
        }
    }

    /** The state a planner's {@link #load()} saw, for its partitions' readers ({@link #adopt}). */
    static final class Planned implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final byte[] header;
        final long time;
        final long size;
        /** The change count the load stood at ({@link StoreGate#NONE}: none, or it moved). */
        final long count;

        Planned(byte[] header, long time, long size, long count) {
            this.header = header;
            this.time = time;
            this.size = size;
            this.count = count;
        }
    }

    /** After a {@link #load()} that found nothing wrong (under change count {@code count}): what it saw. */
    Planned planned(long count) {
        return new Planned(keyHeader, keyTime, size, count);
    }

    /**
     * The state the planner loaded and checked, taken over without walking the free list again
     * when the store file is still as it was then (header bytes, modification time, size): the
     * free pages of {@code [lo, hi)} ({@code freeIn}) and the sums of those pages.  False (nothing
     * taken) when the file changed: the reader loads it itself.  Under a change count
     * ({@code seen}, from {@link #begin}) the planner's must be the same too (both: the count
     * is per machine, and a "local" path of a cluster's executor may be another machine's file).
     * (A free page damaged at rest after the planner checked it, which changes no modification
     * time, is found by the next query's planner, not by this one's reader.)
     */
    boolean adopt(Planned p, long seen, long[] freeIn, long lo, long hi) {
        forget();
        if (p.count != seen) {
            return false;
        }
        long time = mtime();
        byte[] raw = headerBytes();
        long have = fs.size(path);
        if (!Arrays.equals(raw, p.header) || time != p.time || have != p.size) {
            return false;
        }
        decodeHeader(raw);
        keyHeader = raw;
        keyTime = time;
        size = have;
        freeOrder = freeIn;
        free = new HashSet<>();
        for (long f : freeIn) {
            free.add(f);
        }
        loadSums(lo, hi);
        return true;
    }

    /**
     * {@code sums.check_read} of page {@code page}, {@code n} bytes read at {@code buf[at:]}: a
     * short read or a page not matching its checksum (when it has one) is damage.
     */
    void check(long page, byte[] buf, int at, int n) {
        if (n < pageSize) {
            throw new CorruptFileException(path, page * pageSize + n, "page " + page + " of " + pageSize + " bytes",
                "end of file");
        }
        if (sums != null && page <= sumsEntries) {
            int value;
            if (crc32c) {
                CRC32C c = new CRC32C();
                c.update(buf, at, pageSize);
                value = (int) c.getValue();
            } else {
                value = (int) crc32(buf, at, pageSize);
            }
            if (value != sums[(int) (page - sumsFrom)]) {
                throw new CorruptFileException(path, page * pageSize, "page " + page + " matching its checksum",
                    "a different CRC (damaged)");
            }
        }
    }

    /**
     * {@code PageReader.read(page)}: a live page's bytes, checked; a free page or one past the
     * store's pages is a {@link PageException} ({@code reader.not_visible_words}).
     */
    byte[] readPage(long page) {
        if (page > pageCount || free.contains(page)) {
            String holds = "the store file holds " + pageRange(pageCount);
            String where = page > pageCount ? "beyond what the store file holds yet (" + holds + ")"
                : "free in the store file (" + holds + ")";
            throw new PageException(path, page, page * pageSize, where + "; pages a writer has committed reach "
                + "readers at its next flush or checkpoint (a writer opened with apply=\"commit\" makes every commit "
                + "visible at once)");
        }
        byte[] out = new byte[pageSize];
        int n = read(page * pageSize, out, pageSize, size);
        check(page, out, 0, n);
        return out;
    }

    /**
     * Pages {@code [lo, lo + n)} into {@code out} (one read), each live one checked; returns the
     * bytes the file had there.
     */
    int readRun(long lo, int n, byte[] out) {
        int got = read(lo * pageSize, out, n * pageSize, size);
        for (int i = 0; i < n; i++) {
            long p = lo + i;
            if (!free.contains(p)) {
                check(p, out, i * pageSize, Math.max(0, Math.min(pageSize, got - i * pageSize)));
            }
        }
        return got;
    }

    /**
     * {@code storefile.file_present}: whether {@code name} exists; damage if the name is a
     * directory or leads to no file (a dangling or looping symbolic link).
     */
    static boolean present(Hfs fs, String name, String what) {
        Path local = fs.localPath(name);
        if (local == null) {
            if (fs.isDir(name)) {
                throw new CorruptFileException(name, 0, what, "a directory");
            }
            return fs.exists(name);
        }
        if (Files.exists(local)) {
            if (Files.isDirectory(local)) {
                throw new CorruptFileException(name, 0, what, "a directory");
            }
            return true;
        }
        if (Files.exists(local, LinkOption.NOFOLLOW_LINKS)) {
            throw new CorruptFileException(name, 0, what,
                "a name that leads to no file (a dangling or looping symbolic link)");
        }
        return false;
    }

    /**
     * Whether a process holds a {@code flock} on the local file {@code name} (an exclusive one
     * when {@code exclusive}): Linux's {@code /proc/locks}, as {@link WriterLock} reads it.  Not
     * a local file: false (no engine writer runs there).  Unreadable: true (the conservative
     * answer: a live writer).
     */
    static boolean flockHeld(Hfs fs, String name, boolean exclusive) {
        Path local = fs.localPath(name);
        if (local == null) {
            return false;
        }
        long ino;
        try {
            ino = ((Number) Files.getAttribute(local, "unix:ino")).longValue();
        } catch (NoSuchFileException e) {
            return false;
        } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
            return true;
        }
        List<String> lines;
        try {
            lines = Files.readAllLines(Paths.get("/proc/locks"), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            return true;
        }
        String want = ":" + ino;
        for (String line : lines) {
            String[] f = line.trim().split("\\s+");  // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
            if (f.length >= 6 && f[1].equals("FLOCK") && f[5].endsWith(want) && (!exclusive || f[3].equals("WRITE"))) {
                return true;
            }
        }
        return false;
    }
}
