package engine.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Expression;
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
 * {@code engine-pages} on the JVM: page stores as a DataSource V2 batch source, one row per page
 * ({@code store}, {@code page}, {@code offset}, {@code free}, {@code data}; a free page's data
 * is empty: the store keeps its free-list link there).  Column pruning; {@code page} ranges and
 * {@code free = true/false} pushed down (answered exactly: partitions and pages outside them are
 * never read); statistics; columnar batches.  Partitions are page-id ranges of
 * {@code pagesPerPartition} (4096) pages; every live page read and every free page is checked
 * against its checksum ({@link PagesFile}); {@code mode} says what damage does.  See
 * docs/pipeline.md.
 */
public final class PagesSource implements TableProvider, DataSourceRegister {
    static final String SOURCE = "engine-pages";

    @Override
    public String shortName() {
        return SOURCE;
    }

    /** {@code engine.spark.schemas.PAGES_SCHEMA}; PERMISSIVE: nullable plus _corrupt_record. */
    static StructType fullSchema(boolean permissive) {
        return ScanParts.schema(permissive,
            new StructField("store", DataTypes.StringType, false, Metadata.empty()),
            new StructField("page", DataTypes.LongType, false, Metadata.empty()),
            new StructField("offset", DataTypes.LongType, false, Metadata.empty()),
            new StructField("free", DataTypes.BooleanType, false, Metadata.empty()),
            new StructField("data", DataTypes.BinaryType, false, Metadata.empty()));
    }

    /** The options of a read, as {@code pagesource.PagesReader} checks them: pagesPerPartition, mode. */
    static final class Options implements Serializable {
        private static final long serialVersionUID = 1L;
        static final List<String> VALID = Arrays.asList("pagesPerPartition", "mode", "path", "paths",
            "checkpointLocation");
        final Map<String, String> opts;
        final long perPartition;
        final String mode;

        Options(Map<String, String> given) {
            opts = OptionRules.lowered(given);
            OptionRules.checkNames(SOURCE, VALID, opts);
            mode = OptionRules.mode(opts);
            Long per = OptionRules.intOption(opts, "pagesPerPartition", 1);
            perPartition = per == null ? 4096 : per;
        }

        boolean permissive() {
            return mode.equals("PERMISSIVE");
        }

        List<String> inputPaths(Hfs fs) {
            return LogOptions.inputPaths(SOURCE, opts, fs);
        }
    }

    /** Page ids {@code [lo, hi)} of one store; {@code free}: only free (true) or live (false) pages, or all. */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String path;
        final long lo;
        final long hi;
        final Boolean free;
        final long bytes;
        /** The store as the planner loaded and checked it (null: it found damage), and the free pages in range. */
        final PagesFile.Planned planned;
        final long[] freeIn;

        Part(String path, long lo, long hi, Boolean free, long bytes, PagesFile.Planned planned, long[] freeIn) {
            this.path = path;
            this.lo = lo;
            this.hi = hi;
            this.free = free;
            this.bytes = bytes;
            this.planned = planned;
            this.freeIn = freeIn;
        }
    }

    /** The page range and free-or-live choice the pushed filters ask for ({@code hi} exclusive). */
    static final class Bounds implements Serializable {
        private static final long serialVersionUID = 1L;
        long lo = Long.MIN_VALUE;
        long hi = Long.MAX_VALUE;
        Boolean free;
        boolean none;

        void atLeast(long p) {
            lo = Math.max(lo, p);
        }

        void below(long p) {
            hi = Math.min(hi, p);
        }

        void onlyFree(boolean f) {
            if (free != null && free != f) {
                none = true;
            }
            free = f;
        }
    }

    /**
     * {@code pagesource.PagesReader.partitions}: each store opened (its checks made), cut into
     * ranges of {@code perPartition} page ids from 1, those outside {@code b} left out.
     */
    static List<Part> plan(Hfs fs, List<String> paths, Options o, Bounds b) {
        List<Part> parts = new ArrayList<>();
        for (String path : paths) {
            PagesFile f = PagesFile.open(fs, path);
            long count;
            PagesFile.Planned planned = null;
            long[] free = new long[0];
            try {
                count = f.pageCount();
                try {
                    // The free list walked and checked once here, not by every partition: a part
                    // takes it over while the file is unchanged (PagesFile.adopt).  Damage found
                    // here is left to the parts, which report it as their mode says.
                    long seen = f.begin();
                    f.load();
                    planned = f.planned(f.stands(seen) ? seen : StoreGate.NONE);
                    free = f.freeOrder.clone();
                    Arrays.sort(free);
                } catch (CorruptFileException e) {
                    planned = null;
                }
            } finally {
                f.close();
            }
            if (planned == null && (count < 0 || (count - 1) / o.perPartition >= MAX_PARTS)) {
                // A header naming more pages than any file holds (the planner's size check failed):
                // one part, whose reader reports that damage as its mode says, not ~2^63 / n parts.
                parts.add(new Part(path, 1, 1 + o.perPartition, b.free, o.perPartition * f.pageSize, null,
                    new long[0]));
                continue;
            }
            for (long a = 1; a <= count; a += o.perPartition) {
                long lo = Math.max(a, b.lo);
                long hi = Math.min(Math.min(count + 1, a + o.perPartition), b.hi);
                if (lo < hi && !b.none) {
                    int from = lowerBound(free, lo);
                    long[] in = Arrays.copyOfRange(free, from, lowerBound(free, hi));
                    parts.add(new Part(path, lo, hi, b.free, (hi - lo) * f.pageSize, planned, in));
                }
            }
        }
        fs.close();
        return parts;
    }

    /** The most parts one store is cut into when its header's page count is beyond its file. */
    static final long MAX_PARTS = 1_000_000;

    /** The first index of {@code sorted} holding a value >= {@code v}. */
    private static int lowerBound(long[] sorted, long v) {
        int i = Arrays.binarySearch(sorted, v);
        return i >= 0 ? i : -i - 1;
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
        return new BatchTable(SOURCE, schema, properties, p -> new Options(p).permissive(), PagesSource::fullSchema,
            (read, options) -> new PagesScanBuilder(read, new Options(options)));
    }

    /** Narrows {@code b} by {@code p}: page comparisons with an integer, free = a boolean, in ANDs. */
    static boolean push(Predicate p, Bounds b) {
        String op = p.name();
        Expression[] ch = p.children();
        if (op.equals("AND") && ch.length == 2 && ch[0] instanceof Predicate && ch[1] instanceof Predicate) {
            boolean left = push((Predicate) ch[0], b);
            boolean right = push((Predicate) ch[1], b);
            return left && right;  // a conjunct alone is implied by the whole: narrowing by it stays right
        }
        if (op.equals("NOT") && ch.length == 1 && ch[0] instanceof Predicate) {
            // "not free" (Spark's form of free = false): the negation of a free test is the other one.
            Bounds inner = new Bounds();
            Predicate q = (Predicate) ch[0];
            if (push(q, inner) && inner.free != null && inner.lo == Long.MIN_VALUE && inner.hi == Long.MAX_VALUE
                && !inner.none && q.children().length == 2) {
                b.onlyFree(!inner.free);
                return true;
            }
            return false;
        }
        if (op.equals("IS_NOT_NULL") && ch.length == 1) {
            String c = FilterScanBuilder.column(ch[0]);
            return c != null && fullSchema(false).getFieldIndex(c).isDefined();
        }
        FilterScanBuilder.Comparison cmp = FilterScanBuilder.comparison(p);
        if (cmp == null) {
            return false;
        }
        String col = cmp.column;
        Object v = cmp.value;
        op = cmp.op;
        if (col.equals("free") && v instanceof Boolean && op.equals("=")) {
            b.onlyFree((Boolean) v);
            return true;
        }
        if (!col.equals("page") || !(v instanceof Long || v instanceof Integer || v instanceof Short
            || v instanceof Byte)) {
            return false;
        }
        long n = ((Number) v).longValue();
        switch (op) {
            case "=":
                b.atLeast(n);
                b.below(n == Long.MAX_VALUE ? n : n + 1);
                return n != Long.MAX_VALUE;
            case ">=":
                b.atLeast(n);
                return true;
            case ">":
                b.atLeast(n == Long.MAX_VALUE ? n : n + 1);
                return n != Long.MAX_VALUE;
            case "<":
                b.below(n);
                return true;
            case "<=":
                b.below(n == Long.MAX_VALUE ? n : n + 1);
                return n != Long.MAX_VALUE;
            default:
                return false;
        }
    }

    /** Column pruning and the page / free filters. */
    static final class PagesScanBuilder extends FilterScanBuilder<Bounds> {
        private final Options options;

        PagesScanBuilder(StructType schema, Options options) {
            super(schema, options.permissive(), new Bounds());
            this.options = options;
        }

        @Override
        protected boolean answers(Predicate p, Bounds b) {
            return push(p, b);
        }

        @Override
        public Scan build() {
            return new PagesScan(schema, options, bounds, pushed);
        }
    }

    /** One planned scan: partitions from the stores' headers, computed once. */
    static final class PagesScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final Options options;
        private final Bounds bounds;
        private final Predicate[] pushed;
        private final Hfs fs;
        private List<Part> parts;

        PagesScan(StructType schema, Options options, Bounds bounds, Predicate[] pushed) {
            this.schema = schema;
            this.options = options;
            this.bounds = bounds;
            this.pushed = pushed;
            this.fs = LogSource.driverFs();
        }

        List<Part> parts() {
            if (parts == null) {
                parts = plan(fs, options.inputPaths(fs), options, bounds);
            }
            return parts;
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
            return parts().toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ColumnarFactory(SOURCE, fs, schema, options.mode,
                (f, p, s, m) -> new PagesBatchReader(f, (Part) p, s, m));
        }

        @Override
        public Statistics estimateStatistics() {
            long rows = 0;
            long bytes = 0;
            for (Part p : parts()) {
                rows += p.hi - p.lo;
                bytes += p.bytes;
            }
            return ScanParts.statistics(bytes, bounds.free == null ? Long.valueOf(rows) : null);
        }
    }
}
