package engine.spark;

import java.io.Serializable;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The options of an {@code engine-log} read, checked as {@code engine.spark.options} and
 * {@code engine.spark.logplan} check them (same names, same defaults, same messages).
 */
public final class LogOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    public static final String SOURCE = "engine-log";
    static final List<String> VALID = Arrays.asList(
        "recordsPerPartition", "batchRecords", "minPartitions", "mode", "failOnDataLoss",
        "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
        "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "maxRecordsPerTrigger", "maxBytesPerTrigger",
        "path", "paths", "checkpointLocation");
    public static final long EARLIEST = -2;
    public static final long LATEST = -1;

    public final Map<String, String> opts;
    public final long perPartition;
    public final int batchRecords;
    public final long minPartitions;
    public final String mode;
    public final boolean failOnDataLoss;

    public LogOptions(Map<String, String> given) {
        Map<String, String> lower = OptionRules.lowered(given);
        this.opts = lower;
        OptionRules.checkNames(SOURCE, VALID, lower);
        this.perPartition = intOption("recordsPerPartition", 4_000_000L);
        this.batchRecords = (int) Math.min(intOption("batchRecords", 65_536L), 1 << 24);
        this.minPartitions = intOption("minPartitions", 2L);
        intOption("maxRecordsPerTrigger", 1L);
        intOption("maxBytesPerTrigger", 1L);
        this.mode = OptionRules.mode(lower);
        this.failOnDataLoss = boolOption("failOnDataLoss", true);
    }

    private long intOption(String key, long dflt) {
        Long value = OptionRules.intOption(opts, key, 1);
        return value == null ? dflt : value;
    }

    private boolean boolOption(String key, boolean dflt) {
        String raw = opts.get(key.toLowerCase(Locale.ROOT));
        if (raw == null) {
            return dflt;
        }
        String v = raw.strip().toLowerCase(Locale.ROOT);
        if (v.equals("true") || v.equals("1") || v.equals("yes")) {
            return true;
        }
        if (v.equals("false") || v.equals("0") || v.equals("no")) {
            return false;
        }
        throw new ConfigException("option " + key + "='" + raw + "' is not true or false");
    }

    /** maxRecordsPerTrigger / maxBytesPerTrigger, null when not given. */
    public Long maxRecords() {
        return opts.containsKey("maxrecordspertrigger") ? intOption("maxRecordsPerTrigger", 1L) : null;
    }

    public Long maxBytes() {
        return opts.containsKey("maxbytespertrigger") ? intOption("maxBytesPerTrigger", 1L) : null;
    }

    /** The checks of a streaming read (logsource.LogStreamReader): its options only. */
    public void checkStream() {
        List<String> valid = Arrays.asList("recordsPerPartition", "batchRecords", "mode", "failOnDataLoss",
            "maxRecordsPerTrigger", "maxBytesPerTrigger", "startingOffsets", "startingTimestamp",
            "startingOffsetsByTimestamp", "path", "paths", "checkpointLocation");
        OptionRules.checkNames(SOURCE, valid, opts);
        String raw = opts.getOrDefault("startingoffsets", "earliest").strip();
        if (raw.equalsIgnoreCase("latest") && (opts.get("startingtimestamp") != null
            || opts.get("startingoffsetsbytimestamp") != null)) {
            throw new ConfigException(SOURCE + ": give startingOffsets or a starting timestamp, not both");
        }
    }

    public boolean permissive() {
        return mode.equals("PERMISSIVE");
    }

    /** options.input_paths: absolute paths, globs expanded, each existing. */
    public List<String> inputPaths(Hfs fs) {
        return inputPaths(SOURCE, opts, fs);
    }

    /** options.input_paths of {@code source}'s lower-cased options {@code opts}. */
    static List<String> inputPaths(String source, Map<String, String> opts, Hfs fs) {
        final String SOURCE = source;  // (the messages name the source read)
        List<String> raw = new ArrayList<>();
        if (opts.get("paths") != null && !opts.get("paths").isEmpty()) {
            try {
                JsonNode listed = new ObjectMapper().readTree(opts.get("paths"));
                if (!listed.isArray()) {
                    throw new ConfigException(SOURCE + ": option paths must be a JSON list of strings");
                }
                for (JsonNode p : listed) {
                    if (!p.isTextual()) {
                        throw new ConfigException(SOURCE + ": option paths must be a JSON list of strings");
                    }
                    raw.add(p.asText());
                }
            } catch (java.io.IOException e) {
                throw new ConfigException(SOURCE + ": option paths='" + opts.get("paths") + "' is not a JSON list");
            }
        }
        if (opts.get("path") != null && !opts.get("path").isEmpty()) {
            raw.add(0, opts.get("path"));
        }
        if (raw.isEmpty()) {
            throw new ConfigException(SOURCE + " needs a path: .load(PATH), .load([PATH, ...]) or .option('path', PATH)");
        }
        LinkedHashSet<String> out = new LinkedHashSet<>();
        for (String p : raw) {
            String absolute = absolute(p);
            if (p.contains("*") || p.contains("?") || p.contains("[")) {
                List<String> matches = fs.glob(absolute);
                if (matches.isEmpty()) {
                    throw new ConfigException(SOURCE + ": no path matches '" + p + "'");
                }
                out.addAll(matches);
            } else if (!fs.exists(absolute)) {
                throw new ConfigException(SOURCE + ": " + absolute + ": no such file or directory");
            } else {
                out.add(absolute);
            }
        }
        return new ArrayList<>(out);
    }

    static String absolute(String p) {
        if (p.matches("^[A-Za-z][A-Za-z0-9+.-]*:.*") && !p.startsWith("file:")) {
            return p;  // another Hadoop file system: taken as given
        }
        String local = p.startsWith("file:") ? new org.apache.hadoop.fs.Path(p).toUri().getPath() : p;
        if (local.startsWith("~")) {
            local = System.getProperty("user.home") + local.substring(1);
        }
        return Paths.get(local).toAbsolutePath().normalize().toString();
    }

    private Map<String, Long> perLog(String key, String raw, java.util.Set<String> names) {
        if (raw == null) {
            return null;
        }
        Map<String, Long> positions = jsonPositions(key, raw);
        List<String> unknown = new ArrayList<>();
        for (String n : positions.keySet()) {
            if (!names.contains(n)) {
                unknown.add(n);
            }
        }
        if (!unknown.isEmpty()) {
            List<String> sorted = new ArrayList<>(names);
            sorted.sort(null);
            throw new ConfigException(SOURCE + ": option " + key + " names " + pyList(unknown)
                + ", which are not logs of this read; its logs: " + pyList(sorted));
        }
        return positions;
    }

    private static String pyList(List<String> xs) {
        List<String> q = new ArrayList<>();
        for (String x : xs) {
            q.add("'" + x + "'");
        }
        return "[" + String.join(", ", q) + "]";
    }

    private static Map<String, Long> jsonPositions(String key, String raw) {
        JsonNode doc;
        try {
            doc = new ObjectMapper().readTree(raw);
        } catch (java.io.IOException e) {
            throw new ConfigException(SOURCE + ": option " + key + "='" + raw + "' is neither a keyword nor JSON");
        }
        Map<String, Long> out = new TreeMap<>();
        boolean ok = doc != null && doc.isObject();
        if (ok) {
            var it = doc.fields();
            while (it.hasNext()) {
                var e = it.next();
                if (!e.getValue().isIntegralNumber()) {
                    ok = false;
                    break;
                }
                out.put(e.getKey(), e.getValue().asLong());
            }
        }
        if (!ok) {
            throw new ConfigException(SOURCE + ": option " + key + " must be a JSON object of integers, like {\"clicks\": 1200}");
        }
        return out;
    }

    private static long ms(String key, String raw) {
        try {
            return Long.parseLong(raw.strip());
        } catch (NumberFormatException e) {
            throw new ConfigException(SOURCE + ": option " + key + "='" + raw + "' is not milliseconds since the epoch");
        }
    }

    private Long byTime(Hfs fs, LogSegments.Span span, Map<String, Long> byTs, String ts, String key) {
        if (byTs != null && byTs.containsKey(span.log.name)) {
            return span.indexAtTime(fs, byTs.get(span.log.name) * 1_000_000L);
        }
        if (ts != null) {
            return span.indexAtTime(fs, ms(key, ts) * 1_000_000L);
        }
        return null;
    }

    private static java.util.Set<String> names(List<LogSegments.Span> found) {
        java.util.Set<String> names = new java.util.HashSet<>();
        for (LogSegments.Span s : found) {
            names.add(s.log.name);
        }
        return names;
    }

    /** logplan.start_positions: the first index to read per log. */
    public Map<String, Long> startPositions(Hfs fs, List<LogSegments.Span> found) {
        java.util.Set<String> names = names(found);
        Map<String, Long> byTs = perLog("startingOffsetsByTimestamp", opts.get("startingoffsetsbytimestamp"), names);
        String ts = opts.get("startingtimestamp");
        String raw = opts.getOrDefault("startingoffsets", "earliest").strip();
        String low = raw.toLowerCase(Locale.ROOT);
        String keyword = low.equals("earliest") || low.equals("latest") ? low : null;
        Map<String, Long> byIndex = keyword != null ? null : perLog("startingOffsets", raw, names);
        Map<String, Long> out = new HashMap<>();
        for (LogSegments.Span s : found) {
            String name = s.log.name;
            Long atTime = byTime(fs, s, byTs, ts, "startingTimestamp");
            long pos;
            if (atTime != null) {
                pos = atTime;
            } else if (byIndex != null && byIndex.containsKey(name)) {
                pos = byIndex.get(name);
                if (pos == EARLIEST) {
                    pos = s.first();
                } else if (pos == LATEST) {
                    pos = s.next();
                } else if (pos < 0) {
                    throw new ConfigException(SOURCE + ": startingOffsets for '" + name + "' is " + pos
                        + "; use an index, -2 or -1");
                } else if (pos < s.first() && failOnDataLoss) {
                    throw new ConfigException(SOURCE + ": startingOffsets " + pos + " for '" + name
                        + "' is below its first live index " + s.first()
                        + " (records removed by TTL expiry or truncation); set failOnDataLoss=false to start there");
                }
            } else {
                pos = "latest".equals(keyword) ? s.next() : s.first();
            }
            out.put(name, Math.max(pos, s.first()));
        }
        return out;
    }

    /** logplan.end_positions: the index to stop before per log. */
    public Map<String, Long> endPositions(Hfs fs, List<LogSegments.Span> found) {
        java.util.Set<String> names = names(found);
        Map<String, Long> byTs = perLog("endingOffsetsByTimestamp", opts.get("endingoffsetsbytimestamp"), names);
        String ts = opts.get("endingtimestamp");
        String raw = opts.getOrDefault("endingoffsets", "latest").strip();
        if (raw.equalsIgnoreCase("earliest")) {
            throw new ConfigException(SOURCE + ": endingOffsets cannot be 'earliest'");
        }
        Map<String, Long> byIndex = raw.equalsIgnoreCase("latest") ? null : perLog("endingOffsets", raw, names);
        Map<String, Long> out = new HashMap<>();
        for (LogSegments.Span s : found) {
            String name = s.log.name;
            Long atTime = byTime(fs, s, byTs, ts, "endingTimestamp");
            long pos;
            if (atTime != null) {
                pos = atTime;
            } else if (byIndex != null && byIndex.containsKey(name) && byIndex.get(name) != LATEST) {
                pos = byIndex.get(name);
                if (pos < 0) {
                    throw new ConfigException(SOURCE + ": endingOffsets for '" + name + "' is " + pos + "; use an index or -1");
                }
            } else {
                pos = s.next();
            }
            out.put(name, Math.min(pos, s.next()));
        }
        return out;
    }
}
