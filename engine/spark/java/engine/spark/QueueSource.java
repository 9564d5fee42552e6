package engine.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code engine-queue} on the JVM: queue backlogs (one row per item still pending for a reader) as a
 * DataSource V2 batch source with column pruning, pushdown of {@code id} filters ({@link
 * QueuePushdown}: partitions and journal files without ids in range skipped, answered exactly),
 * partitions from the journal files' sizes and first ids ({@link QueuePlan}), statistics and
 * columnar batches; no lock taken, nothing changed.
 * Every record is checked as the queue's own readers check it ({@link QueueFiles}). A streaming read
 * consumes one reader of one queue, confirming items once Spark committed them ({@link QueueStream}).
 * See docs/pipeline.md.
 */
public final class QueueSource implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return QueueOptions.SOURCE;
    }

    /** {@code engine.spark.schemas.QUEUE_SCHEMA}; PERMISSIVE: nullable plus _corrupt_record. */
    static StructType fullSchema(boolean permissive) {
        return ScanParts.schema(permissive,
            new StructField("queue", DataTypes.StringType, false, Metadata.empty()),
            new StructField("reader", DataTypes.StringType, false, Metadata.empty()),
            new StructField("id", DataTypes.LongType, false, Metadata.empty()),
            new StructField("add_time", DataTypes.TimestampType, false, Metadata.empty()),
            new StructField("expire_time", DataTypes.TimestampType, true, Metadata.empty()),
            new StructField("error_count", DataTypes.IntegerType, false, Metadata.empty()),
            new StructField("data", DataTypes.BinaryType, false, Metadata.empty()));
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        QueueOptions o = new QueueOptions(options.asCaseSensitiveMap());
        o.inputPaths(LogSource.driverFs());  // a bad path fails the DataFrame's definition
        return fullSchema(o.permissive());
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        // Reads (batch and micro-batch) are this source's; writes are QueueSink's.
        return new QueueSink.QueueTable(new BatchTable(QueueOptions.SOURCE, schema, properties,
            p -> new QueueOptions(p).permissive(), QueueSource::fullSchema,
            (read, options) -> new QueueScanBuilder(read, new QueueOptions(options)),
            EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ)), schema);
    }

    /** Column pruning and the {@code id} filters ({@link QueuePushdown}). */
    static final class QueueScanBuilder extends FilterScanBuilder<QueuePushdown.Bounds> {
        private final QueueOptions options;

        QueueScanBuilder(StructType schema, QueueOptions options) {
            super(schema, options.permissive(), new QueuePushdown.Bounds());
            this.options = options;
        }

        @Override
        protected boolean answers(Predicate p, QueuePushdown.Bounds b) {
            return QueuePushdown.apply(p, b);
        }

        @Override
        public Scan build() {
            return new QueueScan(schema, options, bounds, pushed);
        }
    }

    /** One planned scan: partitions from the journal files and the pushed id filters, computed once. */
    static final class QueueScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final QueueOptions options;
        private final QueuePushdown.Bounds bounds;
        private final Predicate[] pushed;
        private final Hfs fs;
        private List<QueuePlan.Part> parts;

        QueueScan(StructType schema, QueueOptions options, QueuePushdown.Bounds bounds, Predicate[] pushed) {
            this.schema = schema;
            this.options = options;
            this.bounds = bounds;
            this.pushed = pushed;
            this.fs = LogSource.driverFs();
        }

        List<QueuePlan.Part> parts() {
            if (parts == null) {
                parts = QueuePlan.plan(fs, options.inputPaths(fs), options, bounds);
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
            return QueueOptions.SOURCE + " [" + String.join(", ", schema.fieldNames()) + "]"
                + (p.isEmpty() ? "" : " pushed filters: [" + String.join(", ", p) + "]");
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpoint) {
            // Spark pushes no filter into a stream's scan; were one pushed, the stream would not apply it.
            if (pushed.length != 0) {
                throw new IllegalStateException(QueueOptions.SOURCE + ": a stream's scan was given filters to push ("
                    + pushed.length + "), which a queue reader's stream does not apply");
            }
            return new QueueStream(schema, options);
        }

        @Override
        public InputPartition[] planInputPartitions() {
            return parts().toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return factory(fs, schema, options.mode);
        }

        /** Journal bytes read (each (queue, reader) reads its queue's journal once over its parts; with
         * pushed id filters, the files that can hold those ids). */
        @Override
        public Statistics estimateStatistics() {
            long bytes = 0;
            java.util.Set<String> seen = new java.util.HashSet<>();
            for (QueuePlan.Part p : parts()) {
                if (seen.add(p.directory + "\0" + p.queue + "\0" + p.reader)) {
                    bytes += p.bytes;
                }
            }
            return ScanParts.statistics(bytes, null);
        }
    }

    /** The reader factory of a batch read and of a stream's micro-batches. */
    static ColumnarFactory factory(Hfs fs, StructType schema, String mode) {
        return new ColumnarFactory(QueueOptions.SOURCE, fs, schema, mode,
            (f, p, s, m) -> new QueueBatchReader(f, (QueuePlan.Part) p, s, m));
    }
}
