package engine.spark;

import java.io.Serializable;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * The engine-log sink (batch and streaming): each task writes its own shard (an append log,
 * {@link ShardWriter}) under its job's directory and reports it; the driver publishes the
 * job's shards atomically ({@link SinkDataset}).  A killed job leaves none of its rows
 * visible: its shards are unlisted until the manifest's replacement.
 *
 * <p>Input columns: {@code data} (binary or string, required), {@code time} (timestamp) or
 * {@code time_ns} (long; wins over {@code time}), {@code flags} (integer; null is 0); the
 * source's {@code log}, {@code segment}, {@code index} are ignored, so a read can be written
 * back as it is.  Options: {@code segmentBytes}, {@code ttlSeconds}, {@code streamName}
 * (streaming: the key of the last published batch id in the manifest).
 */
public final class LogSink {
    static final List<String> VALID = Arrays.asList("segmentBytes", "ttlSeconds", "streamName", "path", "paths",
        "checkpointLocation");
    static final List<String> WRITE_COLUMNS = Arrays.asList("data", "time", "time_ns", "flags");
    static final List<String> IGNORED_COLUMNS = Arrays.asList("log", "segment", "index");
    static final long DEFAULT_SEGMENT_BYTES = 64L * 1024 * 1024;

    private LogSink() {
    }

    /** What a task reports to the driver: the shard it wrote and its size. */
    public static final class ShardCommit implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final String jobId;
        final String shard;
        final long records;
        final long bytes;

        ShardCommit(String jobId, String shard, long records, long bytes) {
            this.jobId = jobId;
            this.shard = shard;
            this.records = records;
            this.bytes = bytes;
        }
    }

    /** The options of a write, checked as engine.spark.logsource.LogWriter checked them. */
    static final class Options implements Serializable {
        private static final long serialVersionUID = 1L;
        final String path;
        final long segmentBytes;
        final long ttlNs;
        final String stream;

        Options(Map<String, String> given) {
            Map<String, String> opts = new HashMap<>();
            for (Map.Entry<String, String> e : given.entrySet()) {
                opts.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
            }
            List<String> names = new ArrayList<>(VALID);
            names.sort(String.CASE_INSENSITIVE_ORDER);
            TreeSet<String> unknown = new TreeSet<>();
            for (String k : opts.keySet()) {  // lower case, as engine.spark.options.check_options names them
                if (names.stream().noneMatch(n -> n.equalsIgnoreCase(k))) {
                    unknown.add(k);
                }
            }
            if (!unknown.isEmpty()) {
                throw new ConfigException(LogOptions.SOURCE + ": unknown option(s) " + String.join(", ", unknown)
                    + "; valid options: " + String.join(", ", names));
            }
            List<String> paths = new ArrayList<>();
            if (opts.get("path") != null && !opts.get("path").isEmpty()) {
                paths.add(opts.get("path"));
            }
            if (opts.get("paths") != null && !opts.get("paths").isEmpty() && !opts.get("paths").equals("[]")) {
                paths.add(opts.get("paths"));
            }
            if (paths.isEmpty()) {
                throw new ConfigException(LogOptions.SOURCE
                    + " needs a path: .load(PATH), .load([PATH, ...]) or .option('path', PATH)");
            }
            if (paths.size() != 1) {
                throw new ConfigException(LogOptions.SOURCE + ": needs exactly one path, got " + paths.size());
            }
            this.path = SinkDataset.localPath(paths.get(0)).toString();
            String raw = opts.get("segmentbytes");
            long seg = DEFAULT_SEGMENT_BYTES;
            if (raw != null) {
                try {
                    seg = Long.parseLong(raw.strip());
                } catch (NumberFormatException e) {
                    throw new ConfigException("option segmentBytes='" + raw + "' is not an integer");
                }
                if (seg < 1) {
                    throw new ConfigException("option segmentBytes must be at least 1, not " + seg);
                }
            }
            this.segmentBytes = seg;
            String ttl = opts.get("ttlseconds");
            try {
                this.ttlNs = ttl == null ? 0 : (long) (Double.parseDouble(ttl.strip()) * 1e9);
            } catch (NumberFormatException e) {
                throw new ConfigException("ttlSeconds='" + ttl + "' is not a number");
            }
            this.stream = opts.getOrDefault("streamname", "default");
        }

        Path dataset() {
            return java.nio.file.Paths.get(path);
        }
    }

    /** Where each input column is (-1: absent), checked against what the sink takes. */
    static final class Columns implements Serializable {
        private static final long serialVersionUID = 1L;
        final int data;
        final boolean dataIsString;
        final int time;
        final int timeNs;
        final DataType timeNsType;
        final int flags;
        final DataType flagsType;

        Columns(StructType schema) {
            List<String> names = Arrays.asList(schema.fieldNames());
            List<String> unexpected = new ArrayList<>();
            for (String n : new TreeSet<>(names)) {
                if (!WRITE_COLUMNS.contains(n) && !IGNORED_COLUMNS.contains(n)) {
                    unexpected.add("'" + n + "'");
                }
            }
            if (!unexpected.isEmpty() || !names.contains("data")) {
                throw new ConfigException("engine-log sink: the DataFrame needs a 'data' column (binary or string) "
                    + "and may have 'time' (timestamp), 'time_ns' (long) and 'flags'; unexpected: ["
                    + String.join(", ", unexpected) + "]");
            }
            data = names.indexOf("data");
            DataType dt = schema.fields()[data].dataType();
            dataIsString = dt instanceof StringType;
            check("data", dt, dataIsString || dt instanceof BinaryType, "binary or string");
            timeNs = names.indexOf("time_ns");
            timeNsType = timeNs < 0 ? null : schema.fields()[timeNs].dataType();
            if (timeNs >= 0) {
                check("time_ns", timeNsType, integral(timeNsType), "long");
            }
            time = timeNs >= 0 ? -1 : names.indexOf("time");
            if (time >= 0) {
                DataType t = schema.fields()[time].dataType();
                check("time", t, t instanceof TimestampType || t instanceof TimestampNTZType, "timestamp");
            }
            flags = names.indexOf("flags");
            flagsType = flags < 0 ? null : schema.fields()[flags].dataType();
            if (flags >= 0) {
                check("flags", flagsType, integral(flagsType), "an integer");
            }
        }

        private static boolean integral(DataType t) {
            return t instanceof LongType || t instanceof IntegerType || t instanceof ShortType || t instanceof ByteType;
        }

        private static void check(String name, DataType t, boolean ok, String wanted) {
            if (!ok) {
                throw new ConfigException("engine-log sink: column '" + name + "' is " + t.simpleString() + ", not "
                    + wanted);
            }
        }

        static long integer(InternalRow row, int i, DataType t) {
            if (t instanceof LongType) {
                return row.getLong(i);
            }
            if (t instanceof IntegerType) {
                return row.getInt(i);
            }
            if (t instanceof ShortType) {
                return row.getShort(i);
            }
            return row.getByte(i);
        }

        void write(ShardWriter w, InternalRow row) {
            byte[] payload = row.isNullAt(data) ? null
                : dataIsString ? row.getUTF8String(data).getBytes() : row.getBinary(data);
            Long t = null;
            if (timeNs >= 0) {
                if (row.isNullAt(timeNs)) {
                    throw new ConfigException("engine-log sink: time_ns must not be null");
                }
                t = integer(row, timeNs, timeNsType);
            } else if (time >= 0) {
                if (row.isNullAt(time)) {
                    throw new ConfigException("engine-log sink: time must not be null");
                }
                t = Math.multiplyExact(row.getLong(time), 1000L);
            }
            long f = flags < 0 || row.isNullAt(flags) ? 0 : integer(row, flags, flagsType);
            w.add(payload, f, t);
        }
    }

    static String newJobId() {
        return java.time.LocalDateTime.now().format(java.time.format.DateTimeFormatter.ofPattern("yyyyMMddHHmmss"))
            + "-" + java.util.UUID.randomUUID().toString().replace("-", "").substring(0, 8);
    }

    /** The write of a query: append, or (after {@link #truncate}) overwrite. */
    static final class Builder implements WriteBuilder, SupportsTruncate {
        private final Options options;
        private final Columns columns;
        private boolean overwrite;

        Builder(LogicalWriteInfo info) {
            this.options = new Options(info.options().asCaseSensitiveMap());
            this.columns = new Columns(info.schema());
            SinkDataset.checkTarget(options.dataset());
        }

        @Override
        public WriteBuilder truncate() {
            overwrite = true;
            return this;
        }

        @Override
        public Write build() {
            return new Write() {
                @Override
                public BatchWrite toBatch() {
                    return new Batch(options, columns, newJobId(), overwrite);
                }

                @Override
                public StreamingWrite toStreaming() {
                    if (overwrite) {
                        throw new ConfigException("engine-log sink: a stream appends (outputMode append); "
                            + "it cannot replace the dataset");
                    }
                    return new Stream(options, columns, "stream-" + newJobId());
                }

                @Override
                public String description() {
                    return "engine-log sink " + options.path + (overwrite ? " (overwrite)" : " (append)");
                }
            };
        }
    }

    static List<ShardCommit> commits(WriterCommitMessage[] messages) {
        List<ShardCommit> out = new ArrayList<>();
        for (WriterCommitMessage m : messages) {
            if (m instanceof ShardCommit) {
                out.add((ShardCommit) m);
            }
        }
        return out;
    }

    static final class Batch implements BatchWrite {
        private final Options options;
        private final Columns columns;
        private final String jobId;
        private final boolean overwrite;

        Batch(Options options, Columns columns, String jobId, boolean overwrite) {
            this.options = options;
            this.columns = columns;
            this.jobId = jobId;
            this.overwrite = overwrite;
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return new Factory(options, columns, jobId, false);
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            SinkDataset.commitJob(options.dataset(), commits(messages), overwrite);
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            SinkDataset.abortJob(options.dataset(), jobId);
        }
    }

    static final class Stream implements StreamingWrite {
        private final Options options;
        private final Columns columns;
        private final String jobId;

        Stream(Options options, Columns columns, String jobId) {
            this.options = options;
            this.columns = columns;
            this.jobId = jobId;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            return new Factory(options, columns, jobId, true);
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            SinkDataset.commitStreamBatch(options.dataset(), commits(messages), options.stream, epochId);
        }

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            SinkDataset.abortShards(options.dataset(), commits(messages));
        }
    }

    static final class Factory implements DataWriterFactory, StreamingDataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final Options options;
        private final Columns columns;
        private final String jobId;
        private final boolean streaming;

        Factory(Options options, Columns columns, String jobId, boolean streaming) {
            this.options = options;
            this.columns = columns;
            this.jobId = jobId;
            this.streaming = streaming;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            TaskContext ctx = TaskContext.get();
            int attempt = ctx == null ? 0 : ctx.attemptNumber();
            // A stream's job id is the query's: a new shard per task per micro-batch.
            String tag = streaming ? java.util.UUID.randomUUID().toString().replace("-", "").substring(0, 12) : jobId;
            String shard = String.format("shard-%s-%05d-%d", tag, partitionId, attempt);
            return new RowWriter(new ShardWriter(options.path, jobId, shard, options.segmentBytes, options.ttlNs),
                columns);
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            return createWriter(partitionId, taskId);
        }
    }

    static final class RowWriter implements DataWriter<InternalRow> {
        private final ShardWriter writer;
        private final Columns columns;
        private boolean done;

        RowWriter(ShardWriter writer, Columns columns) {
            this.writer = writer;
            this.columns = columns;
        }

        @Override
        public void write(InternalRow row) {
            columns.write(writer, row);
        }

        @Override
        public WriterCommitMessage commit() {
            ShardCommit c = writer.finish();
            done = true;
            return c;
        }

        @Override
        public void abort() {
            done = true;
            writer.abort();
        }

        @Override
        public void close() {
            if (!done) {
                writer.abort();  // neither committed nor aborted: a failure Spark did not report here
            }
        }
    }
}
