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
 * The options of an {@code engine-events} read, checked as {@code engine.spark.options} checks
 * them for {@code engine.spark.eventsource.EventsReader} (same names, defaults and messages):
 * {@code minPartitions} (2), {@code eventsPerPartition} (4,000,000), {@code idsPerPartition},
 * {@code persistenceIds} (comma-separated), {@code fromSequenceNr},
 * {@code toSequenceNr} (inclusive), {@code mode}.
 */
public final class EventsOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    public static final String SOURCE = "engine-events";
    static final List<String> VALID = Arrays.asList(
        "idsPerPartition", "eventsPerPartition", "minPartitions", "persistenceIds", "fromSequenceNr", "toSequenceNr", "mode",
        "path", "paths", "checkpointLocation");

    public final Map<String, String> opts;
    /** idsPerPartition (null: partitions by events). */
    public final Integer perPartition;
    public final long eventsPerPartition;
    public final long minPartitions;
    /** The ids asked for (null: every id). */
    public final Set<String> ids;
    /** fromSequenceNr (null: from the first). */
    public final Long lo;
    /** toSequenceNr + 1 (null: to the last). */
    public final Long hi;
    public final String mode;

    public EventsOptions(Map<String, String> given) {
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
        Long per = intOption("idsPerPartition", 1);
        this.perPartition = per == null ? null : (int) Math.min(per, Integer.MAX_VALUE);
        Long events = intOption("eventsPerPartition", 1);
        this.eventsPerPartition = events == null ? 4_000_000L : events;
        Long min = intOption("minPartitions", 1);
        this.minPartitions = min == null ? 2 : min;
        String rawIds = lower.get("persistenceids");
        if (rawIds == null) {
            this.ids = null;
        } else {
            Set<String> s = new LinkedHashSet<>();
            for (String i : rawIds.split(",", -1)) {
                s.add(i.strip());
            }
            this.ids = s;
        }
        this.lo = intOption("fromSequenceNr", 0);
        Long to = intOption("toSequenceNr", 0);
        this.hi = to == null ? null : to + 1;
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

    private Long intOption(String key, long minimum) {
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
        if (value < minimum) {
            throw new ConfigException("option " + key + " must be at least " + minimum + ", not " + value);
        }
        return value;
    }

    /** options.input_paths: absolute paths, globs expanded, each existing. */
    public List<String> inputPaths(Hfs fs) {
        return LogOptions.inputPaths(SOURCE, opts, fs);
    }
}
