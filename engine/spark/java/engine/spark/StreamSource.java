package engine.spark;

import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code engine-streams} on the JVM (DRAFT, not registered yet: reachable as
 * {@code format("engine.spark.StreamSource")} until it replaces engine/spark/streamsource.py):
 * one row per stream of each journald journal, one partition per journal file, column
 * pruning (no data copied when {@code data} is not read), statistics from the file sizes,
 * and {@code mode} as the other sources.  Decoding is {@link StreamCodec}'s (every check
 * code verified; a torn tail ends the scan as the Python reader does).
 */
public final class StreamSource implements TableProvider {
    static final String SOURCE = "engine-streams";

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

    /** The read options: only {@code mode} and the paths (LogOptions parses both the same way). */
    static LogOptions options(Map<String, String> given) {
        Map<String, String> keep = new HashMap<>();
        for (Map.Entry<String, String> e : given.entrySet()) {
            String k = e.getKey().toLowerCase(Locale.ROOT);
            if (!k.equals("mode") && !k.equals("path") && !k.equals("paths")) {
                throw new ConfigException(SOURCE + ": unknown option '" + e.getKey() + "' (valid: mode, path, paths)");
            }
            keep.put(k, e.getValue());
        }
        return new LogOptions(keep);
    }

    static boolean isJournal(Hfs fs, String path) {
        if (!fs.exists(path) || fs.isDir(path) || fs.size(path) < StreamCodec.MAGIC.length) {
            return false;
        }
        return java.util.Arrays.equals(fs.readAt(path, 0, StreamCodec.MAGIC.length), StreamCodec.MAGIC);
    }

    /** The journal at each path, or every journal file directly inside a directory (streamsource.journal_files). */
    static List<String> journalFiles(Hfs fs, List<String> paths) {
        Set<String> out = new LinkedHashSet<>();
        for (String p : paths) {
            if (fs.isDir(p)) {
                List<String> inside = new ArrayList<>();
                for (String n : fs.list(p)) {
                    String f = Hfs.join(p.replaceAll("/+$", ""), n.substring(n.lastIndexOf('/') + 1));
                    if (isJournal(fs, f)) {
                        inside.add(f);
                    }
                }
                inside.sort(null);
                out.addAll(inside);
            } else if (isJournal(fs, p)) {
                out.add(p);
            } else {
                throw new ConfigException(p + ": not a stream journal (no 'journald' magic) or a directory of them");
            }
        }
        return new ArrayList<>(out);
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        LogOptions o = options(options.asCaseSensitiveMap());
        o.inputPaths(LogSource.driverFs());
        return fullSchema(o.permissive());
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new StreamTable(schema, properties);
    }

    static final class StreamTable implements Table, SupportsRead {
        private final StructType given;
        private final Map<String, String> properties;

        StreamTable(StructType given, Map<String, String> properties) {
            this.given = given;
            this.properties = properties;
        }

        @Override
        public String name() {
            return SOURCE;
        }

        @Override
        public StructType schema() {
            LogOptions o = options(properties);
            return LogSource.userSchema(fullSchema(o.permissive()), given, o.permissive());
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new Builder(schema(), options(options.asCaseSensitiveMap()));
        }
    }

    static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
        private StructType schema;
        private final LogOptions options;

        Builder(StructType schema, LogOptions options) {
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

    static final class Part implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String path;
        final long size;

        Part(String path, long size) {
            this.path = path;
            this.size = size;
        }
    }

    static final class StreamScan implements Scan, Batch, SupportsReportStatistics {
        private final StructType schema;
        private final LogOptions options;
        private final Hfs fs;
        private List<Part> parts;

        StreamScan(StructType schema, LogOptions options, Hfs fs) {
            this.schema = schema;
            this.options = options;
            this.fs = fs;
        }

        List<Part> parts() {
            if (parts == null) {
                parts = new ArrayList<>();
                for (String f : journalFiles(fs, options.inputPaths(fs))) {
                    parts.add(new Part(f, fs.size(f)));
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
            return new Factory(fs, schema, options.mode);
        }

        /** Sizes only (a journal is a preallocated ring: the file size bounds its streams' bytes). */
        @Override
        public Statistics estimateStatistics() {
            long bytes = 0;
            for (Part p : parts()) {
                bytes += p.size;
            }
            return ScanParts.statistics(bytes, null);
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Hfs fs;
        private final StructType schema;
        private final String mode;

        Factory(Hfs fs, StructType schema, String mode) {
            this.fs = fs;
            this.schema = schema;
            this.mode = mode;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new Reader(fs.fresh(), (Part) partition, schema, mode);
        }
    }

    /** The rows of one journal: its streams, then (FAILFAST) the anomalies' error, as streamsource.read_journal. */
    static final class Reader implements PartitionReader<InternalRow> {
        private final Hfs fs;
        private final Part part;
        private final StructType schema;
        private final String mode;
        private final String name;
        private Iterator<InternalRow> rows;
        private InternalRow current;

        Reader(Hfs fs, Part part, StructType schema, String mode) {
            this.fs = fs;
            this.part = part;
            this.schema = schema;
            this.mode = mode;
            this.name = part.path.substring(part.path.lastIndexOf('/') + 1);
        }

        private List<InternalRow> load() {
            List<InternalRow> out = new ArrayList<>();
            try {
                StreamCodec.Scan s = StreamCodec.scan(fs.readAll(part.path), part.path);
                for (StreamCodec.Stream st : s.streams) {
                    out.add(row(st, null));
                }
                if (!s.anomalies.isEmpty()) {
                    throw new CorruptFileException(part.path, 0, "records consistent with their streams",
                        String.join("; ", s.anomalies));
                }
            } catch (CorruptFileException e) {
                if (mode.equals("FAILFAST")) {
                    throw e;
                }
                if (mode.equals("PERMISSIVE")) {
                    out.add(row(null, e.damageText()));
                }
            }
            return out;
        }

        private InternalRow row(StreamCodec.Stream st, String corrupt) {
            String[] names = schema.fieldNames();
            Object[] v = new Object[names.length];
            for (int i = 0; i < names.length; i++) {
                if (names[i].equals("journal")) {
                    v[i] = UTF8String.fromString(name);
                } else if (names[i].equals(LogBatchReader.CORRUPT)) {
                    v[i] = corrupt == null ? null : UTF8String.fromString(corrupt);
                } else if (st == null) {
                    v[i] = null;
                } else {
                    switch (names[i]) {
                        case "stream": v[i] = st.number; break;
                        case "ident": v[i] = UTF8String.fromString(utf8(st.ident)); break;
                        case "start_offset": v[i] = st.startOffset; break;
                        case "status": v[i] = UTF8String.fromString(st.status); break;
                        case "bytes": v[i] = (long) st.data.length; break;
                        default: v[i] = st.data;
                    }
                }
            }
            return new GenericInternalRow(v);
        }

        /** bytes.decode("utf-8", "replace"). */
        static String utf8(byte[] b) {
            try {
                return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPLACE)
                    .onUnmappableCharacter(CodingErrorAction.REPLACE).decode(java.nio.ByteBuffer.wrap(b)).toString();
            } catch (java.nio.charset.CharacterCodingException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public boolean next() {
            if (rows == null) {
                rows = load().iterator();
            }
            if (!rows.hasNext()) {
                return false;
            }
            current = rows.next();
            return true;
        }

        @Override
        public InternalRow get() {
            return current;
        }

        @Override
        public void close() {
            fs.close();
        }
    }
}
