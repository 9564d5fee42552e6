package engine.spark;

import java.io.Serializable;
import java.util.Arrays;
import java.util.List;
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
        Map<String, String> lower = OptionRules.lowered(given);
        this.opts = lower;
        OptionRules.checkNames(SOURCE, VALID, lower);
        this.mode = OptionRules.mode(lower);
        Long per = intOption("idsPerPartition", 1);
        this.perPartition = per == null ? null : (int) Math.min(per, Integer.MAX_VALUE);
        Long events = intOption("eventsPerPartition", 1);
        this.eventsPerPartition = events == null ? 4_000_000L : events;
        Long min = intOption("minPartitions", 1);
        this.minPartitions = min == null ? 2 : min;
        this.ids = OptionRules.names(lower.get("persistenceids"));
        this.lo = intOption("fromSequenceNr", 0);
        Long to = intOption("toSequenceNr", 0);
        this.hi = to == null ? null : to + 1;
    }

    public boolean permissive() {
        return mode.equals("PERMISSIVE");
    }

    private Long intOption(String key, long minimum) {
        return OptionRules.intOption(opts, key, minimum);
    }

    /** options.input_paths: absolute paths, globs expanded, each existing. */
    public List<String> inputPaths(Hfs fs) {
        return LogOptions.inputPaths(SOURCE, opts, fs);
    }
}
