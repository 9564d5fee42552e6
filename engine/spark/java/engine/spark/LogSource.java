package engine.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * {@code engine-log} on the JVM: append logs as a DataSource V2 batch source with column
 * pruning, index/time range pushdown answered from the IDX files, COUNT/MIN/MAX from
 * metadata, LIMIT, statistics and columnar batches; and the engine-log sink, batch and streaming
 * ({@link LogSink}).  See docs/pipeline.md.
 */
public final class LogSource implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return LogOptions.SOURCE;
    }

    /** The engine-log schema ({@code engine.spark.schemas.LOG_SCHEMA}); PERMISSIVE: nullable plus _corrupt_record. */
    static StructType fullSchema(boolean permissive) {
        return ScanParts.schema(permissive,
            new StructField("log", DataTypes.StringType, false, Metadata.empty()),
            new StructField("segment", DataTypes.LongType, false, Metadata.empty()),
            new StructField("index", DataTypes.LongType, false, Metadata.empty()),
            new StructField("time", DataTypes.TimestampType, false, Metadata.empty()),
            new StructField("time_ns", DataTypes.LongType, false, Metadata.empty()),
            new StructField("flags", DataTypes.LongType, false, Metadata.empty()),
            new StructField("data", DataTypes.BinaryType, false, Metadata.empty()));
    }

    static Hfs driverFs() {
        Configuration conf = SparkContext.getOrCreate().hadoopConfiguration();
        return new Hfs(conf);
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        LogOptions o = new LogOptions(options.asCaseSensitiveMap());
        o.inputPaths(driverFs());  // a bad path fails the DataFrame's definition
        return fullSchema(o.permissive());
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    /**
     * The table of a read or a write: Spark passes a read's schema (inferred or given with
     * .schema(...)) and a write's input schema the same way, so what is checked depends on
     * what is asked of the table: a scan checks the read options and schema
     * ({@link LogTable#newScanBuilder}), a write its own ({@link LogSink}).
     */
    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new LogTable(schema, properties);
    }

    /** options.user_schema: a schema given with .schema(...) must be some of the source's columns. */
    static StructType userSchema(StructType full, StructType given, boolean permissive) {
        return userSchema(LogOptions.SOURCE, full, given, permissive);
    }

    /** options.user_schema for {@code source} (its messages name it). */
    static StructType userSchema(String source, StructType full, StructType given, boolean permissive) {
        if (given == null || given.equals(full)) {
            return full;
        }
        List<String> problems = new ArrayList<>();
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (StructField f : given.fields()) {
            StructField mine = null;
            for (StructField x : full.fields()) {
                if (x.name().equals(f.name())) {
                    mine = x;
                }
            }
            if (mine == null) {
                problems.add("no column '" + f.name() + "'");
            } else if (seen.contains(f.name())) {
                problems.add("'" + f.name() + "' twice");
            } else if (!f.dataType().equals(mine.dataType())) {
                problems.add("'" + f.name() + "' is " + f.dataType().simpleString() + ", not " + mine.dataType().simpleString());
            } else if (mine.nullable() && !f.nullable()) {
                problems.add("'" + f.name() + "' can be null, so it cannot be NOT NULL");
            }
            seen.add(f.name());
        }
        seen.remove(LogBatchReader.CORRUPT);
        if (seen.isEmpty()) {
            problems.add("no column of the source");
        }
        if (permissive && !List.of(given.fieldNames()).contains(LogBatchReader.CORRUPT)) {
            problems.add("mode PERMISSIVE needs the " + LogBatchReader.CORRUPT + " column");
        }
        if (!problems.isEmpty()) {
            List<String> valid = new ArrayList<>();
            for (StructField f : full.fields()) {
                valid.add(f.name() + " " + f.dataType().simpleString() + (f.nullable() ? "" : " NOT NULL"));
            }
            throw new ConfigException(source + ": the schema given with .schema(...) must be some of the source's "
                + "columns with their types (" + String.join(", ", valid) + "); " + String.join("; ", problems));
        }
        return given;
    }

    static final class LogTable implements Table, SupportsRead, SupportsWrite {
        private final StructType given;
        private final Map<String, String> properties;
        private StructType schema;

        LogTable(StructType given, Map<String, String> properties) {
            this.given = given;
            this.properties = properties;
        }

        /** The read schema: the given one once checked against the source's columns. */
        private StructType readSchema() {
            LogOptions o = new LogOptions(properties);
            return userSchema(fullSchema(o.permissive()), given, o.permissive());
        }

        @Override
        public String name() {
            return LogOptions.SOURCE;
        }

        /** A read's checked schema; a write's input schema when it is not one (checked by the sink). */
        @Override
        public StructType schema() {
            if (schema == null) {
                try {
                    schema = readSchema();
                } catch (ConfigException e) {
                    return given;
                }
            }
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
                TableCapability.BATCH_WRITE, TableCapability.TRUNCATE, TableCapability.STREAMING_WRITE);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new LogScanBuilder(readSchema(), new LogOptions(options.asCaseSensitiveMap()));
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return new LogSink.Builder(info);
        }
    }

    /** The scan builder: every pushdown Spark offers a DSv2 source, as far as the files can answer it. */
    public static final class LogScanBuilder extends FilterScanBuilder<LogPlan.Bounds>
        implements SupportsPushDownAggregates, SupportsPushDownLimit {
        private final LogOptions options;
        private Integer limit;
        private LogPushdown.Aggregates aggregates;

        LogScanBuilder(StructType schema, LogOptions options) {
            super(schema, options.permissive(), new LogPlan.Bounds());
            this.options = options;
        }

        @Override
        protected boolean answers(Predicate p, LogPlan.Bounds b) {
            return LogPushdown.apply(p, b);
        }

        @Override
        public boolean supportCompletePushDown(Aggregation aggregation) {
            return LogPushdown.Aggregates.of(aggregation) != null && options.mode.equals("FAILFAST");
        }

        @Override
        public boolean pushAggregation(Aggregation aggregation) {
            if (!options.mode.equals("FAILFAST")) {
                return false;  // a damaged record changes the answer: read every record
            }
            aggregates = LogPushdown.Aggregates.of(aggregation);
            return aggregates != null;
        }

        @Override
        public boolean pushLimit(int n) {
            if (!options.mode.equals("FAILFAST")) {
                return false;
            }
            limit = n;
            return true;
        }

        @Override
        public Scan build() {
            return new LogScan(schema, options, bounds, pushed, limit, aggregates);
        }
    }

    /** One planned scan: partitions are computed once, from the segments and the pushed ranges. */
    public static final class LogScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final LogOptions options;
        private final LogPlan.Bounds bounds;
        private final Predicate[] pushed;
        private final Integer limit;
        private final LogPushdown.Aggregates aggregates;
        private final Hfs fs;
        private List<LogPlan.Part> parts;

        LogScan(StructType schema, LogOptions options, LogPlan.Bounds bounds, Predicate[] pushed, Integer limit,
                LogPushdown.Aggregates aggregates) {
            this.schema = schema;
            this.options = options;
            this.bounds = bounds;
            this.pushed = pushed;
            this.limit = limit;
            this.aggregates = aggregates;
            this.fs = driverFs();
        }

        /** Plans without a Spark session (the parity tests' LogDump). */
        LogScan(StructType schema, LogOptions options, Hfs fs) {
            this.schema = schema;
            this.options = options;
            this.bounds = new LogPlan.Bounds();
            this.pushed = new Predicate[0];
            this.limit = null;
            this.aggregates = null;
            this.fs = fs;
        }

        List<LogPlan.Part> parts() {
            if (parts == null) {
                List<LogSegments.Span> found = LogSegments.spans(fs, LogSegments.logsOf(fs, options.inputPaths(fs)));
                Map<String, Long> starts = options.startPositions(fs, found);
                Map<String, Long> ends = options.endPositions(fs, found);
                long min = aggregates != null ? 1 : options.minPartitions;
                parts = LogPlan.plan(fs, found, starts, ends, bounds, options.perPartition, min, limit);
                fs.close();
            }
            return parts;
        }

        @Override
        public StructType readSchema() {
            return aggregates != null ? aggregates.schema() : schema;
        }

        @Override
        public String description() {
            List<String> p = new ArrayList<>();
            for (Predicate x : pushed) {
                p.add(x.toString());
            }
            return "engine-log [" + String.join(", ", schema.fieldNames()) + "] pushed filters: [" + String.join(", ", p)
                + "]" + (aggregates != null ? " aggregates: " + aggregates : "") + (limit != null ? " limit: " + limit : "");
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(String checkpoint) {
            return new LogStream(schema, options, bounds);
        }

        @Override
        public InputPartition[] planInputPartitions() {
            if (aggregates != null) {
                return new InputPartition[] {aggregates.answer(fs, parts())};
            }
            return parts().toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new Factory(fs, schema, options.mode, options.batchRecords, bounds);
        }

        @Override
        public Statistics estimateStatistics() {
            long rows = 0;
            long bytes = 0;
            for (LogPlan.Part p : parts()) {
                long n = p.stop - p.start;
                rows += n;
                long segBytes = Math.max(0, p.segment.endOffset - LogCodec.HEADER_SIZE);
                long recBytes = p.segment.count == 0 ? 0 : segBytes * n / p.segment.count;
                bytes += recBytes + (long) LogCodec.ENTRY_SIZE * n;
            }
            return aggregates != null ? ScanParts.statistics(64, 1L) : ScanParts.statistics(bytes, rows);
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Hfs fs;
        private final StructType schema;
        private final String mode;
        private final int batchRecords;
        private final LogPlan.Bounds bounds;

        Factory(Hfs fs, StructType schema, String mode, int batchRecords, LogPlan.Bounds bounds) {
            this.fs = fs;
            this.schema = schema;
            this.mode = mode;
            this.batchRecords = batchRecords;
            this.bounds = bounds;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return partition instanceof LogPlan.Part;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new LogBatchReader(fs.fresh(), (LogPlan.Part) partition, schema, mode, batchRecords, bounds);
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            final Object[] values = ((LogPushdown.Answer) partition).values;
            return new PartitionReader<InternalRow>() {
                private boolean given;

                @Override
                public boolean next() {
                    boolean first = !given;
                    given = true;
                    return first;
                }

                @Override
                public InternalRow get() {
                    return new GenericInternalRow(values);
                }

                @Override
                public void close() {
                }
            };
        }
    }

    static Map<String, String> lowerMap(Map<String, String> m) {
        return new HashMap<>(m);
    }
}
