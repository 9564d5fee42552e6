package engine.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.zip.CRC32C;

/**
 * The JVM reader of a key-value store ({@code ENGKVDB1} in a page store,
 * {@code docs/formats/kv.md}) as {@code engine.kv.KVReader} reads it for {@code engine-kv}: the
 * page store opened and read through {@link PagesFile} (its checks and page checksums), the meta
 * page ({@code pager.read_meta}, {@code node.decode_meta}), nodes ({@code node.decode_node}:
 * CRC-32C, kinds, counts, lengths, key order, child and overflow ids), descents that check each
 * node's level and key range ({@code tree.leaf_at}), overflow chains
 * ({@code pager.overflow_chain}), the scan ({@code tree.scan}: one leaf at a time, each found by
 * a descent from the root for the key past the last leaf's separator) and the planner's split
 * keys ({@code kvsource.split_points}).  Errors are the Python ones, word for word.
 *
 * <p>The JVM holds no lock ({@link PagesFile}): the reader reads each batch of a scan, from its
 * descent to its last leaf, between two loads of the store's change count, and again, from the
 * meta page on ({@link #snap}), when the count moved ({@link KvBatchReader}).
 */
final class KvTree {
    static final int HEAD = 20;
    static final int LEAF = 0x4C;
    static final int BRANCH = 0x42;
    static final int OVERFLOW = 0x4F;
    static final int MAX_HEIGHT = 48;

    final PagesFile file;
    final String path;
    int pageSize;
    long pageCount;
    /** The trees by name (meta order), as (root, count, height). */
    final Map<String, long[]> trees = new LinkedHashMap<>();
    private final Map<Long, Node> cache = new HashMap<>();

    /** A decoded node: keys, and a leaf's values (byte[] or an overflow ref) or a branch's children. */
    static final class Node {
        int level;
        byte[][] keys;
        Object[] vals;
        long[] children;
    }

    /** An overflow value's first page and length. */
    static final class Ref {
        final long page;
        final long length;

        Ref(long page, long length) {
            this.page = page;
            this.length = length;
        }
    }

    private KvTree(PagesFile file) {
        this.file = file;
        this.path = file.path;
    }

    /**
     * {@code KVReader.open}: the page store's open; the meta page is read and checked by the
     * first {@link #settled} read.
     */
    static KvTree open(Hfs fs, String path) {
        return new KvTree(PagesFile.open(fs, path));
    }

    /**
     * {@code read} made from one state of the store file: between two loads of the store's
     * change count ({@link PagesFile#begin}, {@link PagesFile#stands}), the state loaded anew
     * ({@link #snap}) unless it is that count's, and all of it again (after a pause) when the
     * count moved; damage found while it moved is looked at again before it is reported.  A
     * writer changing the file at every try: the task fails ({@link StoreGate#busy}); without a
     * count (see {@link StoreGate#open}), as before it existed, the last try stands.
     */
    <T> T settled(java.util.function.Supplier<T> read) {
        for (int attempt = 0; ; attempt++) {
            long seen = file.begin();
            boolean last = attempt >= PagesBatchReader.ATTEMPTS;
            try {
                if (!file.current(seen)) {
                    snap();
                }
                T got = read.get();
                if (file.stands(seen) || last && seen == StoreGate.NONE) {
                    file.stood(seen);
                    return got;
                }
            } catch (CorruptFileException | PageException e) {
                if (last && seen == StoreGate.NONE || file.stands(seen)) {
                    throw e;
                }
            }
            if (last) {
                throw StoreGate.busy(path, attempt);
            }
            PagesFile.backoff(attempt);
        }
    }

    /** {@code KVReader._snap}: the page count, the meta page and its trees (the node cache cleared). */
    void snap() {
        file.forget();
        cache.clear();
        trees.clear();
        pageCount = file.pageCount();
        pageSize = file.pageSize;
        if (pageCount == 0) {
            return;  // a new store not yet checkpointed: empty
        }
        file.load(false);
        byte[] data = file.readPage(1);
        if (!(data[0] == 'E' && data[1] == 'N' && data[2] == 'G' && data[3] == 'K' && data[4] == 'V' && data[5] == 'D'
            && data[6] == 'B' && data[7] == '1')) {
            throw new CorruptFileException(path, data.length, "a key-value store's meta page (ENGKVDB1)",
                spaced(data, 0, 8), true);
        }
        int version = u16(data, 8);
        if (version != 1) {
            throw meta(data, 8, "meta version 1", Integer.toString(version));
        }
        int n = u16(data, 10);
        long crc = u32(data, 12);
        int at = 24;
        Set<String> names = new HashSet<>();
        for (int i = 0; i < n; i++) {
            if (at + 20 > data.length) {
                throw meta(data, at, "a tree entry inside the page", null);
            }
            long root = u64(data, at);
            long count = u64(data, at + 8);
            int height = data[at + 16] & 0xFF;
            int nlen = u16(data, at + 18);
            int nameEnd = Math.min(data.length, at + 20 + nlen);
            String key = Py.hex(Arrays.copyOfRange(data, at + 20, nameEnd));
            if (nameEnd - (at + 20) != nlen || names.contains(key)) {
                throw meta(data, at + 18, "a tree name inside the page, each name once", key);
            }
            if (!(Long.compareUnsigned(root, 2) >= 0 && Long.compareUnsigned(root, pageCount) <= 0)) {
                throw meta(data, at, "a root page in 2.." + pageCount, Long.toUnsignedString(root));
            }
            if (height < 1 || height > MAX_HEIGHT) {
                throw meta(data, at + 16, "a tree height in 1.." + MAX_HEIGHT, Integer.toString(height));
            }
            names.add(key);
            trees.put(key, new long[] {root, count, height});
            at += 20 + nlen;
        }
        if (pageCrc(data, 12, at) != crc) {
            throw meta(data, 12, "a meta page matching its CRC-32C", String.format("0x%08x", crc) + " (damaged)");
        }
    }

    private CorruptFileException meta(byte[] data, int at, String expected, String found) {
        return new CorruptFileException(path, data.length + at, expected, found);
    }

    /** {@code bytes.hex(" ")}. */
    static String spaced(byte[] b, int at, int n) {
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < n && at + i < b.length; i++) {
            s.append(i > 0 ? " " : "").append(String.format("%02x", b[at + i] & 0xFF));
        }
        return s.toString();
    }

    private static int u16(byte[] b, int at) {
        return (b[at] & 0xFF) | (b[at + 1] & 0xFF) << 8;
    }

    private static long u32(byte[] b, int at) {
        return ByteBuffer.wrap(b, at, 4).order(ByteOrder.LITTLE_ENDIAN).getInt() & 0xFFFFFFFFL;
    }

    private static long u64(byte[] b, int at) {
        return ByteBuffer.wrap(b, at, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
    }

    /** {@code node.page_crc}: CRC-32C of {@code data[:crcAt]} and {@code data[crcAt + 4:end]}. */
    static long pageCrc(byte[] data, int crcAt, int end) {
        CRC32C c = new CRC32C();
        c.update(data, 0, Math.min(crcAt, end));
        if (end > crcAt + 4) {
            c.update(data, crcAt + 4, end - crcAt - 4);
        }
        return c.getValue();
    }

    /** The tree's entry (root, count, height), or null. */
    long[] info(byte[] name) {
        return trees.get(Py.hex(name));
    }

    /** Tree names (hex keys) in meta order. */
    List<String> names() {
        return new ArrayList<>(trees.keySet());
    }

    // -- nodes ----------------------------------------------------------------------------------

    private CorruptFileException at(long page, long off, String expected, String found) {
        return new CorruptFileException(path, page * pageSize + off, expected, found);
    }

    /** {@code pager.load_node}: the node at {@code page}, read (checked) and decoded once. */
    Node node(long page) {
        Node found = cache.get(page);
        if (found != null) {
            return found;
        }
        byte[] data;
        try {
            data = file.readPage(page);
        } catch (PageException e) {
            throw new CorruptFileException(path, e.offset, "a pointer to a live node page", e.reason);
        }
        found = decode(page, data);
        cache.put(page, found);
        return found;
    }

    /** {@code node.decode_node} with {@code pager.decode_page}'s absolute offsets. */
    private Node decode(long page, byte[] data) {
        int ps = data.length;
        int kind = data[0] & 0xFF;
        int level = data[1] & 0xFF;
        int n = u16(data, 2);
        long used = u32(data, 4);
        long crc = u32(data, 8);
        long nxt = u64(data, 12);
        if (used > ps || used < HEAD || nxt != 0) {
            throw at(page, 4, "a node's used size in " + HEAD + ".." + ps + " and no next page",
                used + ", next " + Long.toUnsignedString(nxt));
        }
        int u = (int) used;
        if (pageCrc(data, 8, u) != crc) {
            throw at(page, 8, "a node matching its CRC-32C", String.format("0x%08x", crc) + " (damaged)");
        }
        Node node = new Node();
        node.level = level;
        if (kind == LEAF) {
            if (level != 0) {
                throw at(page, 1, "level 0 in a leaf", Integer.toString(level));
            }
            int end = HEAD + 4 * n;
            if (end > u) {
                throw at(page, 2, "an entry count that fits the page", Integer.toString(n));
            }
            int[] koffs = new int[n + 1];
            int[] voffs = new int[n + 1];
            koffs[0] = end;
            for (int i = 0; i < n; i++) {
                koffs[i + 1] = koffs[i] + u16(data, HEAD + 2 * i);
            }
            voffs[0] = koffs[n];
            for (int i = 0; i < n; i++) {
                int mark = u16(data, HEAD + 2 * n + 2 * i);
                voffs[i + 1] = voffs[i] + (mark == 0xFFFF ? 12 : mark);
            }
            if (voffs[n] != u) {
                throw at(page, 4, "entries that end at the used size " + u, Integer.toString(voffs[n]));
            }
            node.keys = slices(data, koffs, n);
            if (!ascending(node.keys)) {
                throw at(page, end, "keys in strictly ascending order", null);
            }
            node.vals = new Object[n];
            for (int i = 0; i < n; i++) {
                if (u16(data, HEAD + 2 * n + 2 * i) == 0xFFFF) {
                    long first = u64(data, voffs[i]);
                    if (!(Long.compareUnsigned(first, 2) >= 0 && Long.compareUnsigned(first, pageCount) <= 0)) {
                        throw at(page, voffs[i], "an overflow page in 2.." + pageCount, Long.toUnsignedString(first));
                    }
                    node.vals[i] = new Ref(first, u32(data, voffs[i] + 8));
                } else {
                    node.vals[i] = Arrays.copyOfRange(data, voffs[i], voffs[i + 1]);
                }
            }
            return node;
        }
        if (kind == BRANCH) {
            if (level < 1 || level > MAX_HEIGHT) {
                throw at(page, 1, "a branch level in 1.." + MAX_HEIGHT, Integer.toString(level));
            }
            long end = HEAD + 10L * n + 8;
            if (end > u) {
                throw at(page, 2, "a key count that fits the page", Integer.toString(n));
            }
            int[] koffs = new int[n + 1];
            koffs[0] = (int) end;
            for (int i = 0; i < n; i++) {
                koffs[i + 1] = koffs[i] + u16(data, HEAD + 2 * i);
            }
            if (koffs[n] != u) {
                throw at(page, 4, "keys that end at the used size " + u, Integer.toString(koffs[n]));
            }
            node.keys = slices(data, koffs, n);
            if (!ascending(node.keys)) {
                throw at(page, end, "separator keys in strictly ascending order", null);
            }
            node.children = new long[n + 1];
            for (int i = 0; i <= n; i++) {
                node.children[i] = u64(data, HEAD + 2 * n + 8 * i);
            }
            for (int i = 0; i <= n; i++) {
                long c = node.children[i];
                if (!(Long.compareUnsigned(c, 2) >= 0 && Long.compareUnsigned(c, pageCount) <= 0)) {
                    throw at(page, HEAD + 2L * n + 8L * i, "a child page in 2.." + pageCount, Long.toUnsignedString(c));
                }
            }
            return node;
        }
        throw at(page, 0, "a leaf (0x4c) or branch (0x42) page", String.format("0x%02x", kind));
    }

    private static byte[][] slices(byte[] data, int[] offs, int n) {
        byte[][] out = new byte[n][];
        for (int i = 0; i < n; i++) {
            out[i] = Arrays.copyOfRange(data, offs[i], offs[i + 1]);
        }
        return out;
    }

    static int cmp(byte[] a, byte[] b) {
        return Arrays.compareUnsigned(a, b);
    }

    private static boolean ascending(byte[][] keys) {
        for (int i = 1; i < keys.length; i++) {
            if (cmp(keys[i - 1], keys[i]) >= 0) {
                return false;
            }
        }
        return true;
    }

    /** {@code bisect_left} (right = false) or {@code bisect_right} of {@code key} in {@code keys}. */
    static int bisect(byte[][] keys, byte[] key, boolean right) {
        int lo = 0;
        int hi = keys.length;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            int c = cmp(keys[mid], key);
            if (c < 0 || (right && c == 0)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    /** {@code tree.checked}: the node at {@code page}, which its parent says is at {@code level} in [lo, hi). */
    private Node checked(long page, int level, byte[] lo, byte[] hi) {
        Node node = node(page);
        if (node.level != level) {
            throw at(page, 1, "a node of level " + level + " (its parent's level - 1)", Integer.toString(node.level));
        }
        byte[][] keys = node.keys;
        if (keys.length > 0 && ((lo != null && cmp(keys[0], lo) < 0) || (hi != null && cmp(keys[keys.length - 1], hi) >= 0))) {
            throw at(page, HEAD, "keys inside the range its parent's separators give", null);
        }
        return node;
    }

    /** One leaf of a scan: its pairs in [lower, upper) with values read, and its separator range. */
    static final class Fetched {
        final List<byte[]> keys = new ArrayList<>();
        final List<byte[]> values = new ArrayList<>();
        byte[] lo;
        byte[] hi;
    }

    /** {@code tree.fetcher}'s fetch (forward): {@code tree.leaf_at} for {@code lower}, then its pairs. */
    Fetched fetch(long[] info, byte[] lower, byte[] upper) {
        long page = info[0];
        int height = (int) info[2];
        Fetched f = new Fetched();
        for (int level = height - 1; level > 0; level--) {
            Node node = checked(page, level, f.lo, f.hi);
            int i = lower == null ? 0 : bisect(node.keys, lower, true);
            if (i > 0) {
                f.lo = node.keys[i - 1];
            }
            if (i < node.keys.length) {
                f.hi = node.keys[i];
            }
            page = node.children[i];
        }
        Node leaf = checked(page, 0, f.lo, f.hi);
        int i = lower == null ? 0 : bisect(leaf.keys, lower, false);
        int end = upper == null ? leaf.keys.length : bisect(leaf.keys, upper, false);
        for (int k = i; k < end; k++) {
            f.keys.add(leaf.keys[k]);
            Object v = leaf.vals[k];
            f.values.add(v instanceof Ref ? overflow((Ref) v) : (byte[]) v);
        }
        return f;
    }

    /** {@code pager.read_overflow} ({@code overflow_chain}'s checks). */
    byte[] overflow(Ref ref) {
        int per = pageSize - HEAD;
        long want = Math.max(1, -Math.floorDiv(-ref.length, per));
        // Grown as the chain is read (a damaged length is caught at its first page, never allocated).
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream((int) Math.min(ref.length, 1 << 20));
        long page = ref.page;
        Set<Long> seen = new HashSet<>();
        for (long i = 0; i < want; i++) {
            if (!seen.add(page)) {
                throw at(page, 0, "an overflow chain without a cycle", "page " + page + " again");
            }
            byte[] data;
            try {
                data = file.readPage(page);
            } catch (PageException e) {
                throw new CorruptFileException(path, e.offset, "a live overflow page", e.reason);
            }
            int kind = data[0] & 0xFF;
            if (kind != OVERFLOW || data[1] != 0 || u16(data, 2) != 0) {
                throw at(page, 0, "an overflow page (0x4f)", String.format("0x%02x", kind));
            }
            long used = u32(data, 4);
            if (used < HEAD || used > data.length) {
                throw at(page, 4, "an overflow page's used size in " + HEAD + ".." + data.length, Long.toString(used));
            }
            long crc = u32(data, 8);
            if (pageCrc(data, 8, (int) used) != crc) {
                throw at(page, 8, "an overflow page matching its CRC-32C", String.format("0x%08x", crc) + " (damaged)");
            }
            long nxt = u64(data, 12);
            if (nxt != 0 && !(Long.compareUnsigned(nxt, 2) >= 0 && Long.compareUnsigned(nxt, pageCount) <= 0)) {
                throw at(page, 12, "a next overflow page in 2.." + pageCount, Long.toUnsignedString(nxt));
            }
            boolean last = i == want - 1;
            long chunk = used - HEAD;
            if (chunk != (last ? ref.length - per * i : per) || (nxt != 0) == last) {
                throw at(page, 0, "overflow page " + (i + 1) + " of " + want + " for a " + ref.length + "-byte value",
                    Long.toString(chunk));
            }
            out.write(data, HEAD, (int) chunk);
            page = nxt;
        }
        return out.toByteArray();
    }

    /**
     * {@code kvsource.split_points}: up to {@code parts - 1} keys inside (start, stop) cutting
     * the range evenly, from the separators of the tree's upper levels (no leaf read).
     */
    List<byte[]> splitPoints(byte[] name, byte[] start, byte[] stop, long parts) {
        List<byte[]> seps = new ArrayList<>();
        long[] info = info(name);
        if (parts <= 1 || info == null || info[2] == 1) {
            return seps;
        }
        List<Long> level = new ArrayList<>(List.of(info[0]));
        for (int depth = 0; depth < info[2] - 1; depth++) {
            List<byte[]> all = new ArrayList<>();
            List<Long> children = new ArrayList<>();
            for (long page : level) {
                Node node = node(page);
                if (node.children == null) {
                    // (Python's assert: a leaf where the tree's height says a branch is)
                    throw at(page, 1, "a node of level " + (info[2] - 1 - depth) + " (its parent's level - 1)",
                        Integer.toString(node.level));
                }
                all.addAll(Arrays.asList(node.keys));
                for (long c : node.children) {
                    children.add(c);
                }
            }
            List<byte[]> inside = new ArrayList<>();
            for (byte[] k : all) {
                if ((start == null || cmp(k, start) > 0) && (stop == null || cmp(k, stop) < 0)) {
                    inside.add(k);
                }
            }
            seps = inside;
            if (inside.size() >= parts - 1 || children.size() > 4096) {
                break;
            }
            level = children;
        }
        if (seps.size() <= parts - 1) {
            return seps;
        }
        double step = (double) seps.size() / parts;
        TreeSet<byte[]> picked = new TreeSet<>(KvTree::cmp);
        for (long i = 1; i < parts; i++) {
            picked.add(seps.get((int) (step * i)));
        }
        return new ArrayList<>(picked);
    }
}
