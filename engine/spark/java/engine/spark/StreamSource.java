package engine.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code engine-streams} on the JVM: one row per stream of each journald journal (ident,
 * start offset, status complete / aborted / open, the data), as a DataSource V2 batch source.
 * A journal is read front to back by {@link StreamScanner} through Hadoop's FileSystem in
 * bounded windows (any file size, memory a window plus the streams being assembled); every
 * check code is verified whatever is selected, and the idents and data are not copied when
 * their columns are not read.  Partitions: whole journals (one can only be read from its
 * start), consecutive ones grouped up to about {@code bytesPerPartition} (256 MiB) bytes and
 * {@code 1 / minPartitions} (2) of the total; statistics from the file sizes; columnar batches
 * ({@link StreamBatchReader}); {@code mode} as the other sources (the streams read before damage, then FAILFAST fails, DROPMALFORMED ends
 * the journal there, PERMISSIVE adds one row naming the file and offset).  See docs/pipeline.md.
 */
public final class StreamSource implements TableProvider, DataSourceRegister {
    static final String SOURCE = "engine-streams";

    @Override
    public String shortName() {
        return SOURCE;
    }

    static StructType fullSchema(boolean permissive) {
        return ScanParts.schema(permissive,
            new StructField("journal", DataTypes.StringType, false, Metadata.empty()),
            new StructField("stream", DataTypes.LongType, false, Metadata.empty()),
            new StructField("ident", DataTypes.StringType, false, Metadata.empty()),
            new StructField("start_offset", DataTypes.LongType, false, Metadata.empty()),
            new StructField("status", DataTypes.StringType, false, Metadata.empty()),
            new StructField("bytes", DataTypes.LongType, false, Metadata.empty()),
            new StructField("data", DataTypes.BinaryType, false, Metadata.empty()));
    }

    /** The read options: {@code mode}, {@code bytesPerPartition} (256 MiB), {@code minPartitions} (2), the paths. */
    static final class Options implements Serializable {
        private static final long serialVersionUID = 1L;
        static final List<String> VALID = Arrays.asList("mode", "bytesPerPartition", "minPartitions", "path", "paths");
        final Map<String, String> opts;
        final String mode;
        final long bytesPerPartition;
        final long minPartitions;

        Options(Map<String, String> given) {
            opts = OptionRules.lowered(given);
            OptionRules.checkNames(SOURCE, VALID, opts);
            mode = OptionRules.mode(opts);
            Long per = OptionRules.intOption(opts, "bytesPerPartition", 1);
            bytesPerPartition = per == null ? 256L << 20 : per;
            Long min = OptionRules.intOption(opts, "minPartitions", 1);
            minPartitions = min == null ? 2 : min;
        }

        boolean permissive() {
            return mode.equals("PERMISSIVE");
        }

        List<String> inputPaths(Hfs fs) {
            return LogOptions.inputPaths(SOURCE, opts, fs);
        }
    }

    /** Whether {@code path} is a file starting with the journald magic (streamsource.is_stream_journal). */
    static boolean isJournal(Hfs fs, String path) {
        if (fs.isDir(path) || fs.size(path) < StreamCodec.MAGIC.length) {
            return false;
        }
        return Arrays.equals(fs.readAt(path, 0, StreamCodec.MAGIC.length), StreamCodec.MAGIC);
    }

    /**
     * The journal at each path, or every journal file directly inside a directory, sorted
     * (streamsource.journal_files), once each, with their sizes.
     */
    static Map<String, Long> journalFiles(Hfs fs, List<String> paths) {
        Map<String, Long> out = new LinkedHashMap<>();
        for (String p : paths) {
            if (fs.isDir(p)) {
                List<String> inside = new ArrayList<>();
                for (String n : fs.list(p)) {
                    String f = Hfs.join(p.replaceAll("/+$", ""), n);
                    if (isJournal(fs, f)) {
                        inside.add(f);
                    }
                }
                inside.sort(null);
                for (String f : inside) {
                    out.putIfAbsent(f, fs.size(f));
                }
            } else if (isJournal(fs, p)) {
                out.putIfAbsent(p, fs.size(p));
            } else {
                throw new ConfigException(p + ": not a stream journal (no 'journald' magic) or a directory of them");
            }
        }
        return out;
    }

    /**
     * Whole journals in order, consecutive ones grouped while a group holds less than the
     * target: {@code bytesPerPartition}, or less so that there are {@code minPartitions}.
     */
    static List<Part> plan(Map<String, Long> files, long bytesPerPartition, long minPartitions) {
        long total = 0;
        for (long size : files.values()) {
            total += size;
        }
        long target = Math.max(1, Math.min(bytesPerPartition, -Math.floorDiv(-total, minPartitions)));
        List<Part> parts = new ArrayList<>();
        List<String> group = new ArrayList<>();
        long bytes = 0;
        for (Map.Entry<String, Long> f : files.entrySet()) {
            group.add(f.getKey());
            bytes += f.getValue();
            if (bytes >= target) {
                parts.add(new Part(group.toArray(new String[0]), bytes));
                group.clear();
                bytes = 0;
            }
        }
        if (!group.isEmpty()) {
            parts.add(new Part(group.toArray(new String[0]), bytes));
        }
        return parts;
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
        return new BatchTable(SOURCE, schema, properties, p -> new Options(p).permissive(), StreamSource::fullSchema,
            (read, options) -> new Builder(read, new Options(options)));
    }

    /** Column pruning (no filter pushdown: a journal is read whole, front to back). */
    static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
        private StructType schema;
        private final Options options;

        Builder(StructType schema, Options options) {
            this.schema = schema;
            this.options = options;
        }

        @Override
        public void pruneColumns(StructType required) {
            schema = ScanParts.prune(schema, required, options.permissive());
        }

        @Override
        public Scan build() {
            return new StreamScan(schema, options, LogSource.driverFs());
        }
    }

    /** Whole journals, read one after the other by one task. */
    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String[] paths;
        final long bytes;

        Part(String[] paths, long bytes) {
            this.paths = paths;
            this.bytes = bytes;
        }
    }

    static final class StreamScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final Options options;
        private final Hfs fs;
        private List<Part> parts;

        StreamScan(StructType schema, Options options, Hfs fs) {
            this.schema = schema;
            this.options = options;
            this.fs = fs;
        }

        /** The plan, from the files' names, sizes and first 8 bytes (computed once). */
        List<Part> parts() {
            if (parts == null) {
                Hfs planning = fs.fresh();
                try {
                    parts = plan(journalFiles(planning, options.inputPaths(planning)), options.bytesPerPartition,
                        options.minPartitions);
                } finally {
                    planning.close();
                }
            }
            return parts;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return SOURCE + " [" + String.join(", ", schema.fieldNames()) + "]";
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
                (f, p, s, m) -> new StreamBatchReader(f, (Part) p, s, m));
        }

        /** Sizes only (a journal is a preallocated ring: the file size bounds its streams' bytes). */
        @Override
        public Statistics estimateStatistics() {
            long bytes = 0;
            for (Part p : parts()) {
                bytes += p.bytes;
            }
            return ScanParts.statistics(bytes, null);
        }
    }
}
