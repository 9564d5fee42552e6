package engine.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
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
 * {@code engine-events} on the JVM: event journals as a DataSource V2 batch source with column
 * pruning, pushdown of persistence-id and sequence-number filters (answered exactly by the
 * partitions and replay), statistics from the meta files and columnar batches.  Every block read
 * is checked as the Python reader checks it, data.crc included ({@link EventsJournal}).  See
 * docs/pipeline.md.
 */
public final class EventsSource implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return EventsOptions.SOURCE;
    }

    /** {@code engine.spark.schemas.EVENTS_SCHEMA}; PERMISSIVE: nullable plus _corrupt_record. */
    static StructType fullSchema(boolean permissive) {
        return ScanParts.schema(permissive,
            new StructField("journal", DataTypes.StringType, false, Metadata.empty()),
            new StructField("persistence_id", DataTypes.StringType, false, Metadata.empty()),
            new StructField("sequence_nr", DataTypes.LongType, false, Metadata.empty()),
            new StructField("payload", DataTypes.BinaryType, false, Metadata.empty()));
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        EventsOptions o = new EventsOptions(options.asCaseSensitiveMap());
        o.inputPaths(LogSource.driverFs());  // a bad path fails the DataFrame's definition
        return fullSchema(o.permissive());
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new BatchTable(EventsOptions.SOURCE, schema, properties, p -> new EventsOptions(p).permissive(),
            EventsSource::fullSchema, (read, options) -> new EventsScanBuilder(read, new EventsOptions(options)));
    }

    /** Column pruning and the id / sequence-number filters ({@link EventsPushdown}). */
    static final class EventsScanBuilder extends FilterScanBuilder<EventsPlan.Bounds> {
        private final EventsOptions options;

        EventsScanBuilder(StructType schema, EventsOptions options) {
            super(schema, options.permissive(), new EventsPlan.Bounds(options));
            this.options = options;
        }

        @Override
        protected boolean answers(Predicate p, EventsPlan.Bounds b) {
            return EventsPushdown.apply(p, b);
        }

        @Override
        public Scan build() {
            return new EventsScan(schema, options, bounds, pushed);
        }
    }

    /** One planned scan: partitions from the journals' meta files, computed once. */
    static final class EventsScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final EventsOptions options;
        private final EventsPlan.Bounds bounds;
        private final Predicate[] pushed;
        private final Hfs fs;
        private List<EventsPlan.Part> parts;

        EventsScan(StructType schema, EventsOptions options, EventsPlan.Bounds bounds, Predicate[] pushed) {
            this.schema = schema;
            this.options = options;
            this.bounds = bounds;
            this.pushed = pushed;
            this.fs = LogSource.driverFs();
        }

        List<EventsPlan.Part> parts() {
            if (parts == null) {
                parts = EventsPlan.plan(fs, options.inputPaths(fs), bounds, options);
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
            return EventsOptions.SOURCE + " [" + String.join(", ", schema.fieldNames()) + "] pushed filters: ["
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
            return new ColumnarFactory("engine-events", fs, schema, options.mode,
                (f, p, s, m) -> new EventsBatchReader(f, (EventsPlan.Part) p, s, m));
        }

        @Override
        public Statistics estimateStatistics() {
            long rows = 0;
            long bytes = 0;
            for (EventsPlan.Part p : parts()) {
                rows += p.rows;
                bytes += p.bytes;
            }
            return ScanParts.statistics(bytes, rows);
        }
    }
}
