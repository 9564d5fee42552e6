package engine.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The options of an {@code engine-queue} batch read, checked as {@code engine.spark.queuesource.QueueReader}
 * checks them (same names, defaults and messages): {@code queue} and {@code reader} (comma-separated
 * names; default every queue and every reader with a checkpoint file), {@code bytesPerPartition}
 * (256 MiB), {@code minPartitions} (2), {@code mode}.
 */
public final class QueueOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    public static final String SOURCE = "engine-queue";
    static final List<String> VALID = Arrays.asList(
        "queue", "reader", "mode", "bytesPerPartition", "minPartitions", "path", "paths", "checkpointLocation");

    public final Map<String, String> opts;
    /** The queues / readers asked for (null: every one). */
    public final Set<String> queues;
    public final Set<String> readers;
    public final long bytesPerPartition;
    public final long minPartitions;
    public final String mode;

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
    }

    public boolean permissive() {
        return mode.equals("PERMISSIVE");
    }

    /** options.input_paths: absolute paths, globs expanded, each existing. */
    public List<String> inputPaths(Hfs fs) {
        return LogOptions.inputPaths(SOURCE, opts, fs);
    }
}
