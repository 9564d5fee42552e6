package engine.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
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
        Map<String, String> lower = new HashMap<>();
        for (Map.Entry<String, String> e : given.entrySet()) {
            lower.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
        }
        this.opts = lower;
        checkOptions();
        String raw = lower.getOrDefault("mode", "FAILFAST").strip().toUpperCase(Locale.ROOT);
        if (!raw.equals("FAILFAST") && !raw.equals("DROPMALFORMED") && !raw.equals("PERMISSIVE")) {
            throw new ConfigException("option mode='" + raw + "': use one of FAILFAST, DROPMALFORMED, PERMISSIVE");
        }
        this.mode = raw;
        this.queues = names(lower.get("queue"));
        this.readers = names(lower.get("reader"));
        Long per = intOption("bytesPerPartition");
        this.bytesPerPartition = per == null ? 256L << 20 : per;
        Long min = intOption("minPartitions");
        this.minPartitions = min == null ? 2 : min;
    }

    private static Set<String> names(String raw) {
        if (raw == null) {
            return null;
        }
        Set<String> s = new LinkedHashSet<>();
        for (String n : raw.split(",", -1)) {
            s.add(n.strip());
        }
        return s;
    }

    public boolean permissive() {
        return mode.equals("PERMISSIVE");
    }

    private void checkOptions() {
        List<String> names = new ArrayList<>(VALID);
        names.sort(String.CASE_INSENSITIVE_ORDER);
        Set<String> known = new LinkedHashSet<>();
        for (String n : names) {
            known.add(n.toLowerCase(Locale.ROOT));
        }
        List<String> unknown = new ArrayList<>();
        for (String k : opts.keySet()) {
            if (!known.contains(k)) {
                unknown.add(k);
            }
        }
        unknown.sort(null);
        if (!unknown.isEmpty()) {
            throw new ConfigException(SOURCE + ": unknown option(s) " + String.join(", ", unknown) + "; valid options: "
                + String.join(", ", names));
        }
    }

    private Long intOption(String key) {
        String raw = opts.get(key.toLowerCase(Locale.ROOT));
        if (raw == null) {
            return null;
        }
        long value;
        try {
            value = Long.parseLong(raw.strip());
        } catch (NumberFormatException e) {
            throw new ConfigException("option " + key + "='" + raw + "' is not an integer");
        }
        if (value < 1) {
            throw new ConfigException("option " + key + " must be at least 1, not " + value);
        }
        return value;
    }

    /** options.input_paths: absolute paths, globs expanded, each existing. */
    public List<String> inputPaths(Hfs fs) {
        return LogOptions.inputPaths(SOURCE, opts, fs);
    }
}
