package engine.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The options of an {@code engine-queue} read, checked as {@code engine.spark.queuesource.QueueReader}
 * checks them (same names, defaults and messages): {@code queue} and {@code reader} (comma-separated
 * names; default every queue and every reader with a checkpoint file), {@code bytesPerPartition}
 * (256 MiB), {@code minPartitions} (2), {@code mode}; a stream's (accepted and without effect in a
 * batch read, as Kafka's source does): {@code maxRecordsPerTrigger} (1000), {@code maxBytesPerTrigger}
 * (none), {@code failOnDataLoss} (true).
 */
public final class QueueOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    public static final String SOURCE = "engine-queue";
    static final List<String> VALID = Arrays.asList(
        "queue", "reader", "mode", "bytesPerPartition", "minPartitions", "path", "paths", "checkpointLocation",
        "maxRecordsPerTrigger", "maxBytesPerTrigger", "failOnDataLoss");
    /** Items per micro-batch unless maxRecordsPerTrigger says otherwise (the Python source's default). */
    static final long DEFAULT_STREAM_ITEMS = 1000;

    public final Map<String, String> opts;
    /** The queues / readers asked for (null: every one). */
    public final Set<String> queues;
    public final Set<String> readers;
    public final long bytesPerPartition;
    public final long minPartitions;
    public final String mode;
    public final long maxRecords;
    /** maxBytesPerTrigger: data bytes per micro-batch (null: no bound). */
    public final Long maxBytes;
    public final boolean failOnDataLoss;

    public QueueOptions(Map<String, String> given) {
        Map<String, String> lower = OptionRules.lowered(given);
        this.opts = lower;
        OptionRules.checkNames(SOURCE, VALID, lower);
        this.mode = OptionRules.mode(lower);
        this.queues = OptionRules.names(lower.get("queue"));
        this.readers = OptionRules.names(lower.get("reader"));
        Long per = OptionRules.intOption(lower, "bytesPerPartition", 1);
        this.bytesPerPartition = per == null ? 256L << 20 : per;
        Long min = OptionRules.intOption(lower, "minPartitions", 1);
        this.minPartitions = min == null ? 2 : min;
        Long items = OptionRules.intOption(lower, "maxRecordsPerTrigger", 1);
        this.maxRecords = items == null ? DEFAULT_STREAM_ITEMS : items;
        this.maxBytes = OptionRules.intOption(lower, "maxBytesPerTrigger", 1);
        this.failOnDataLoss = OptionRules.boolOption(lower, "failOnDataLoss", true);
    }

    /** A stream reads one reader of one queue of one directory: its directory. */
    public String streamDirectory(Hfs fs) {
        List<String> dirs = inputPaths(fs);
        if (dirs.size() != 1) {
            throw new ConfigException(SOURCE + " streaming reads one queue directory, not " + dirs.size());
        }
        String queue = opts.get("queue");
        if (queue == null || queue.isEmpty() || queue.contains(",")) {
            throw new ConfigException(SOURCE + " streaming needs option('queue', NAME) naming one queue");
        }
        return dirs.get(0);
    }

    /** The stream's queue and reader (default "": the queue's default reader). */
    public String streamQueue() {
        return opts.get("queue");
    }

    public String streamReader() {
        return opts.getOrDefault("reader", "");
    }

    public boolean permissive() {
        return mode.equals("PERMISSIVE");
    }

    /** options.input_paths: absolute paths, globs expanded, each existing. */
    public List<String> inputPaths(Hfs fs) {
        return LogOptions.inputPaths(SOURCE, opts, fs);
    }
}
