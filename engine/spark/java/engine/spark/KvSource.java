package engine.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code engine-kv} on the JVM: one tree of each key-value store as a DataSource V2 batch
 * source, one row per key ({@code store}, {@code tree}, {@code key}, {@code value}) in key order
 * within each partition.  Options as {@code kvsource}: {@code tree}, {@code start} (inclusive),
 * {@code stop} (exclusive), {@code prefix}, {@code hex}, {@code partitions} (4: the range split
 * at separator keys of the tree's upper levels), {@code mode}.  Column pruning; {@code key}
 * comparisons with a binary literal pushed down into the scan's range (exact: only the leaves
 * in range are read); statistics (the trees' key counts for a whole-tree read); columnar
 * batches.  Every page read is checked ({@link KvTree}).  See docs/pipeline.md.
 */
public final class KvSource implements TableProvider, DataSourceRegister {
    static final String SOURCE = "engine-kv";

    @Override
    public String shortName() {
        return SOURCE;
    }

    /** {@code engine.spark.kvsource.KV_SCHEMA}; PERMISSIVE: nullable plus _corrupt_record. */
    static StructType fullSchema(boolean permissive) {
        return ScanParts.schema(permissive,
            new StructField("store", DataTypes.StringType, false, Metadata.empty()),
            new StructField("tree", DataTypes.StringType, false, Metadata.empty()),
            new StructField("key", DataTypes.BinaryType, false, Metadata.empty()),
            new StructField("value", DataTypes.BinaryType, false, Metadata.empty()));
    }

    /** The options of a read, checked as {@code kvsource.KVSourceReader} checks them. */
    static final class Options implements Serializable {
        private static final long serialVersionUID = 1L;
        static final List<String> VALID = Arrays.asList("tree", "start", "stop", "prefix", "hex", "partitions", "mode",
            "path", "paths", "checkpointLocation");
        final Map<String, String> opts;
        final String mode;
        final byte[] tree;
        final byte[] start;
        final byte[] stop;
        final long partitions;

        Options(Map<String, String> given) {
            opts = OptionRules.lowered(given);
            OptionRules.checkNames(SOURCE, VALID, opts);
            mode = OptionRules.mode(opts);
            String name = opts.getOrDefault("tree", "");
            tree = name.getBytes(StandardCharsets.UTF_8);
            if (tree.length > 255) {
                throw new ConfigException("a tree name is at most 255 bytes, not " + tree.length + " (" + Py.repr(name)
                    + ")");
            }
            boolean hex = bool("hex");
            byte[] a = raw("start", hex);
            byte[] b = raw("stop", hex);
            byte[] prefix = raw("prefix", hex);
            if (prefix != null && prefix.length > 0) {
                a = a == null ? prefix : KvTree.cmp(a, prefix) >= 0 ? a : prefix;
                byte[] end = prefixEnd(prefix);
                if (end != null) {
                    b = b == null ? end : KvTree.cmp(b, end) <= 0 ? b : end;
                }
            }
            start = a;
            stop = b;
            Long n = OptionRules.intOption(opts, "partitions", 1);
            partitions = n == null ? 4 : n;
        }

        private boolean bool(String key) {
            String raw = opts.get(key);
            if (raw == null) {
                return false;
            }
            String v = raw.strip().toLowerCase(Locale.ROOT);
            if (v.equals("true") || v.equals("1") || v.equals("yes")) {
                return true;
            }
            if (v.equals("false") || v.equals("0") || v.equals("no")) {
                return false;
            }
            throw new ConfigException("option " + key + "=" + Py.repr(raw) + " is not true or false");
        }

        /** {@code key_bounds}' raw(): UTF-8, or with hex=true {@code bytes.fromhex}. */
        private byte[] raw(String name, boolean hex) {
            String text = opts.get(name);
            if (text == null) {
                return null;
            }
            if (!hex) {
                return text.getBytes(StandardCharsets.UTF_8);
            }
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            int i = 0;
            while (i < text.length()) {
                char c = text.charAt(i);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0b || c == '\f') {
                    i++;
                    continue;
                }
                int hi = i + 1 < text.length() ? Character.digit(text.charAt(i + 1), 16) : -1;
                int lo = Character.digit(c, 16);
                if (lo < 0 || hi < 0 || c > 0x7f || text.charAt(i + 1) > 0x7f) {
                    throw new ConfigException(SOURCE + ": option " + name + " is not hex: " + Py.repr(text));
                }
                out.write(lo << 4 | hi);
                i += 2;
            }
            return out.toByteArray();
        }

        boolean permissive() {
            return mode.equals("PERMISSIVE");
        }

        List<String> inputPaths(Hfs fs) {
            return LogOptions.inputPaths(SOURCE, opts, fs);
        }
    }

    /** {@code api.prefix_end}: the smallest key above every key starting with {@code prefix} (null: none). */
    static byte[] prefixEnd(byte[] prefix) {
        int n = prefix.length;
        while (n > 0 && prefix[n - 1] == (byte) 0xFF) {
            n--;
        }
        if (n == 0) {
            return null;
        }
        byte[] end = Arrays.copyOf(prefix, n);
        end[n - 1]++;
        return end;
    }

    /** Keys {@code [start, stop)} of one tree of one store (null: unbounded). */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String path;
        final byte[] tree;
        final byte[] start;
        final byte[] stop;
        final long bytes;

        Part(String path, byte[] tree, byte[] start, byte[] stop, long bytes) {
            this.path = path;
            this.tree = tree;
            this.start = start;
            this.stop = stop;
            this.bytes = bytes;
        }
    }

    /** The key range of a read: the options' narrowed by the pushed filters. */
    static final class Bounds implements Serializable {
        private static final long serialVersionUID = 1L;
        byte[] start;
        byte[] stop;
        boolean pushed;

        Bounds(Options o) {
            start = o.start;
            stop = o.stop;
        }

        void atLeast(byte[] k) {
            start = start == null || KvTree.cmp(k, start) > 0 ? k : start;
            pushed = true;
        }

        void below(byte[] k) {
            stop = stop == null || KvTree.cmp(k, stop) < 0 ? k : stop;
            pushed = true;
        }
    }

    /** {@code key + b"\0"}: the smallest key above {@code key}. */
    private static byte[] after(byte[] key) {
        return Arrays.copyOf(key, key.length + 1);
    }

    /** The plan of a read: its parts, and the keys they hold when known (whole trees), else -1. */
    static final class Plan {
        final List<Part> parts = new ArrayList<>();
        long rows;
    }

    /**
     * {@code kvsource.KVSourceReader.partitions}: per store, the range cut at
     * {@link KvTree#splitPoints}; nothing (no store opened) for an empty range.
     */
    static Plan plan(Hfs fs, List<String> paths, Options o, Bounds b) {
        Plan plan = new Plan();
        boolean whole = b.start == null && b.stop == null;
        if (b.start != null && b.stop != null && KvTree.cmp(b.start, b.stop) >= 0) {
            return plan;
        }
        for (String path : paths) {
            KvTree t = KvTree.open(fs, path);
            List<byte[]> cuts;
            try {
                cuts = t.settled(() -> t.splitPoints(o.tree, b.start, b.stop, o.partitions));
            } finally {
                t.file.close();
            }
            long[] info = t.info(o.tree);
            plan.rows += info == null ? 0 : info[1];
            long bytes = (t.pageCount + 1) * (long) t.pageSize / (cuts.size() + 1);
            byte[] lo = b.start;
            for (int i = 0; i <= cuts.size(); i++) {
                byte[] hi = i < cuts.size() ? cuts.get(i) : b.stop;
                plan.parts.add(new Part(path, o.tree, lo, hi, bytes));
                lo = hi;
            }
        }
        if (!whole) {
            plan.rows = -1;
        }
        fs.close();
        return plan;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        Options o = new Options(options.asCaseSensitiveMap());
        o.inputPaths(LogSource.driverFs());  // a bad path fails the DataFrame's definition
        return fullSchema(o.permissive());
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new BatchTable(SOURCE, schema, properties, p -> new Options(p).permissive(), KvSource::fullSchema,
            (read, options) -> new KvScanBuilder(read, new Options(options)));
    }

    /** Narrows {@code b} by {@code p}: {@code key} compared with a binary literal, in ANDs. */
    static boolean push(Predicate p, Bounds b) {
        String op = p.name();
        Expression[] ch = p.children();
        if (op.equals("AND") && ch.length == 2 && ch[0] instanceof Predicate && ch[1] instanceof Predicate) {
            boolean left = push((Predicate) ch[0], b);
            boolean right = push((Predicate) ch[1], b);
            return left && right;  // a conjunct alone is implied by the whole: narrowing by it stays right
        }
        if (op.equals("IS_NOT_NULL") && ch.length == 1 && ch[0] instanceof NamedReference) {
            return fullSchema(false).getFieldIndex(((NamedReference) ch[0]).fieldNames()[0]).isDefined();
        }
        if (ch.length != 2) {
            return false;
        }
        boolean flipped = !(ch[0] instanceof NamedReference);
        Expression col = flipped ? ch[1] : ch[0];
        Expression lit = flipped ? ch[0] : ch[1];
        if (!(col instanceof NamedReference) || !(lit instanceof Literal)
            || !Arrays.equals(((NamedReference) col).fieldNames(), new String[] {"key"})
            || !(((Literal<?>) lit).value() instanceof byte[])) {
            return false;
        }
        byte[] k = (byte[]) ((Literal<?>) lit).value();
        if (flipped) {
            op = op.equals("<") ? ">" : op.equals("<=") ? ">=" : op.equals(">") ? "<" : op.equals(">=") ? "<=" : op;
        }
        switch (op) {
            case "=":
            case "<=>":
                b.atLeast(k);
                b.below(after(k));
                return true;
            case ">=":
                b.atLeast(k);
                return true;
            case ">":
                b.atLeast(after(k));
                return true;
            case "<":
                b.below(k);
                return true;
            case "<=":
                b.below(after(k));
                return true;
            default:
                return false;
        }
    }

    /** Column pruning and the key-range filters. */
    static final class KvScanBuilder extends FilterScanBuilder<Bounds> {
        private final Options options;

        KvScanBuilder(StructType schema, Options options) {
            super(schema, options.permissive(), new Bounds(options));
            this.options = options;
        }

        @Override
        protected boolean answers(Predicate p, Bounds b) {
            return push(p, b);
        }

        @Override
        public Scan build() {
            return new KvScan(schema, options, bounds, pushed);
        }
    }

    /** One planned scan: partitions from the trees' upper levels, computed once. */
    static final class KvScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final Options options;
        private final Bounds bounds;
        private final Predicate[] pushed;
        private final Hfs fs;
        private Plan plan;

        KvScan(StructType schema, Options options, Bounds bounds, Predicate[] pushed) {
            this.schema = schema;
            this.options = options;
            this.bounds = bounds;
            this.pushed = pushed;
            this.fs = LogSource.driverFs();
        }

        Plan plan() {
            if (plan == null) {
                plan = KvSource.plan(fs, options.inputPaths(fs), options, bounds);
            }
            return plan;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            List<String> p = new ArrayList<>();
            for (Predicate x : pushed) {
                p.add(x.toString());
            }
            return SOURCE + " [" + String.join(", ", schema.fieldNames()) + "] pushed filters: ["
                + String.join(", ", p) + "]";
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            return plan().parts.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ColumnarFactory(SOURCE, fs, schema, options.mode,
                (f, p, s, m) -> new KvBatchReader(f, (Part) p, s, m));
        }

        @Override
        public Statistics estimateStatistics() {
            long bytes = 0;
            for (Part p : plan().parts) {
                bytes += p.bytes;
            }
            return ScanParts.statistics(bytes, plan().rows < 0 ? null : Long.valueOf(plan().rows));
        }
    }
}
