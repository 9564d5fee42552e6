package engine.spark;

import java.io.Serializable;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The engine-queue sink (batch and streaming, append only): each task stages its rows in a
 * file of its own beside the queue ({@link QueueStage}); the driver's commit puts them into
 * the queue, in partition order, through Python's producer ({@link QueueCommit},
 * {@code engine.spark.queuesink}).  A job killed before its commit leaves none of its rows in
 * the queue; a commit a crash interrupts is finished by the next commit or
 * {@code engine spark cleanup}.  See docs/pipeline.md, "The queue sink".
 *
 * <p>Input columns: {@code data} (binary or string, required), {@code expire_time}
 * (timestamp; null: never); the source's {@code queue}, {@code reader}, {@code id},
 * {@code add_time}, {@code error_count} are ignored, so a read can be written back.
 * Options: {@code queue} (the queue's name, required), {@code commitTimeoutSeconds} (600),
 * {@code streamName} (streaming: the key of the last micro-batch put).
 */
public final class QueueSink {
    static final String SINK = "engine-queue sink";
    static final List<String> VALID = Arrays.asList("queue", "commitTimeoutSeconds", "streamName", "path", "paths",
        "checkpointLocation");
    static final List<String> IGNORED_COLUMNS = Arrays.asList("queue", "reader", "id", "add_time", "error_count");

    private QueueSink() {
    }

    /** The table of {@code engine.spark.QueueSource}: its reads, and writes into a queue. */
    static final class QueueTable implements Table, SupportsRead, SupportsWrite {
        private final Table read;
        private final StructType given;

        QueueTable(Table read, StructType given) {
            this.read = read;
            this.given = given;
        }

        @Override
        public String name() {
            return read.name();
        }

        /** A read's checked schema; a write's input schema when it is not one (checked by the sink). */
        @Override
        public StructType schema() {
            try {
                return read.schema();
            } catch (ConfigException e) {
                return given;
            }
        }

        @Override
        public Set<TableCapability> capabilities() {
            Set<TableCapability> c = EnumSet.copyOf(read.capabilities());
            c.add(TableCapability.BATCH_WRITE);
            c.add(TableCapability.STREAMING_WRITE);
            return c;
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            read.schema();  // a read with a schema that is not the source's fails here, as without the sink
            return ((SupportsRead) read).newScanBuilder(options);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            return new Builder(info);
        }
    }

    /** The options of a write; nothing is created while they are checked. */
    static final class Options implements Serializable {
        private static final long serialVersionUID = 1L;
        final String directory;
        final String queue;
        final long timeout;
        final String stream;

        Options(Map<String, String> given) {
            Map<String, String> opts = OptionRules.lowered(given);
            OptionRules.checkNames(SINK, VALID, opts);
            List<String> paths = new ArrayList<>();
            for (String k : new String[] {"path", "paths"}) {
                String v = opts.get(k);
                if (v != null && !v.isEmpty() && !v.equals("[]")) {
                    paths.add(v);
                }
            }
            if (paths.size() != 1) {
                throw new ConfigException(SINK + " needs one path, the queue's directory: .save(DIR)");
            }
            String abs = LogOptions.absolute(paths.get(0));
            if (abs.matches("^[A-Za-z][A-Za-z0-9+.-]*:.*")) {
                throw new ConfigException(SINK + ": " + paths.get(0) + ": a queue lives on a local (or mounted) "
                    + "file system");
            }
            this.directory = abs;
            this.queue = opts.get("queue");
            if (queue == null || queue.isEmpty()) {
                throw new ConfigException(SINK + " needs the queue's name: .option('queue', NAME)");
            }
            Long t = OptionRules.intOption(opts, "commitTimeoutSeconds", 1);
            this.timeout = t == null ? 600 : t;
            this.stream = opts.getOrDefault("streamname", "default");
        }

        Path part(String job, int partition, int attempt) {
            return Paths.get(directory, queue + ".sink", "job-" + job, String.format("part-%05d-%d", partition,
                attempt));
        }
    }

    /** Where the input columns are: {@code data} and, optionally, {@code expire_time}. */
    static final class Columns implements Serializable {
        private static final long serialVersionUID = 1L;
        final int data;
        final boolean dataIsString;
        final int expire;

        Columns(StructType schema) {
            List<String> names = Arrays.asList(schema.fieldNames());
            List<String> unexpected = new ArrayList<>();
            for (String n : new TreeSet<>(names)) {
                if (!n.equals("data") && !n.equals("expire_time") && !IGNORED_COLUMNS.contains(n)) {
                    unexpected.add("'" + n + "'");
                }
            }
            if (!unexpected.isEmpty() || !names.contains("data")) {
                throw new ConfigException(SINK + ": the DataFrame needs a 'data' column (binary or string) and may "
                    + "have 'expire_time' (timestamp); unexpected: [" + String.join(", ", unexpected) + "]");
            }
            data = names.indexOf("data");
            DataType dt = schema.fields()[data].dataType();
            dataIsString = dt instanceof StringType;
            if (!dataIsString && !(dt instanceof BinaryType)) {
                throw new ConfigException(SINK + ": column 'data' is " + dt.simpleString() + ", not binary or string");
            }
            expire = names.indexOf("expire_time");
            if (expire >= 0) {
                DataType t = schema.fields()[expire].dataType();
                if (!(t instanceof TimestampType || t instanceof TimestampNTZType)) {
                    throw new ConfigException(SINK + ": column 'expire_time' is " + t.simpleString()
                        + ", not timestamp");
                }
            }
        }

        void write(QueueStage s, InternalRow row) {
            byte[] payload = row.isNullAt(data) ? null
                : dataIsString ? row.getUTF8String(data).getBytes() : row.getBinary(data);
            Long ms = expire < 0 || row.isNullAt(expire) ? null : Math.floorDiv(row.getLong(expire), 1000L);
            s.add(payload, ms);
        }
    }

    /** What a task reports: its staged file. */
    static final class PartCommit implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final int partition;
        final String part;
        final long rows;

        PartCommit(int partition, String part, long rows) {
            this.partition = partition;
            this.part = part;
            this.rows = rows;
        }
    }

    /** The commit's arguments: the job's parts in partition order. */
    static List<String> commitArgs(Options o, String job, WriterCommitMessage[] messages) {
        List<PartCommit> parts = new ArrayList<>();
        for (WriterCommitMessage m : messages) {
            if (m instanceof PartCommit) {
                parts.add((PartCommit) m);
            }
        }
        parts.sort(Comparator.comparingInt(p -> p.partition));
        List<String> args = new ArrayList<>(Arrays.asList("commit", o.directory, o.queue, job));
        for (PartCommit p : parts) {
            args.add(p.part);
        }
        return args;
    }

    static final class Builder implements WriteBuilder {
        private final Options options;
        private final Columns columns;

        Builder(LogicalWriteInfo info) {
            this.options = new Options(info.options().asCaseSensitiveMap());
            this.columns = new Columns(info.schema());
            QueueCommit.run(options.timeout, "check", options.directory, options.queue);
        }

        @Override
        public Write build() {
            return new Write() {
                @Override
                public BatchWrite toBatch() {
                    return new Batch(options, columns, LogSink.newJobId());
                }

                @Override
                public StreamingWrite toStreaming() {
                    return new Stream(options, columns, "stream-" + LogSink.newJobId());
                }

                @Override
                public String description() {
                    return SINK + " " + options.directory + " queue " + options.queue;
                }
            };
        }
    }

    static final class Batch implements BatchWrite {
        private final Options options;
        private final Columns columns;
        private final String job;

        Batch(Options options, Columns columns, String job) {
            this.options = options;
            this.columns = columns;
            this.job = job;
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return new Factory(options, columns, job);
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            QueueCommit.run(options.timeout, commitArgs(options, job, messages).toArray(new String[0]));
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            QueueCommit.run(options.timeout, "abort", options.directory, options.queue, job);
        }
    }

    /** Micro-batch {@code e} of a stream is job {@code <job>-e<e>}; put once per streamName and epoch. */
    static final class Stream implements StreamingWrite {
        private final Options options;
        private final Columns columns;
        private final String job;

        Stream(Options options, Columns columns, String job) {
            this.options = options;
            this.columns = columns;
            this.job = job;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            return new Factory(options, columns, job);
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            List<String> args = commitArgs(options, job + "-e" + epochId, messages);
            args.addAll(Arrays.asList("--stream", options.stream, "--epoch", Long.toString(epochId)));
            QueueCommit.run(options.timeout, args.toArray(new String[0]));
        }

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            QueueCommit.run(options.timeout, "abort", options.directory, options.queue, job + "-e" + epochId);
        }
    }

    static final class Factory implements DataWriterFactory, StreamingDataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final Options options;
        private final Columns columns;
        private final String job;

        Factory(Options options, Columns columns, String job) {
            this.options = options;
            this.columns = columns;
            this.job = job;
        }

        private DataWriter<InternalRow> writer(String jobId, int partitionId) {
            TaskContext ctx = TaskContext.get();
            int attempt = ctx == null ? 0 : ctx.attemptNumber();
            Path path = options.part(jobId, partitionId, attempt);
            return new RowWriter(new QueueStage(path, System.currentTimeMillis()), columns, partitionId);
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            return writer(job, partitionId);
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            return writer(job + "-e" + epochId, partitionId);
        }
    }

    static final class RowWriter implements DataWriter<InternalRow> {
        private final QueueStage stage;
        private final Columns columns;
        private final int partition;
        private final String name;
        private boolean done;

        RowWriter(QueueStage stage, Columns columns, int partition) {
            this.stage = stage;
            this.columns = columns;
            this.partition = partition;
            this.name = stage.name();
        }

        @Override
        public void write(InternalRow row) {
            columns.write(stage, row);
        }

        @Override
        public WriterCommitMessage commit() {
            stage.finish();
            done = true;
            return new PartCommit(partition, name, stage.rows());
        }

        @Override
        public void abort() {
            done = true;
            stage.abort();
        }

        @Override
        public void close() {
            if (!done) {
                stage.abort();  // neither committed nor aborted: a failure Spark did not report here
            }
        }
    }
}
