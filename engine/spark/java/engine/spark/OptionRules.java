package engine.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The option rules every source of the connector shares, with {@code engine.spark.options}'
 * names and messages: one copy, so that the sources cannot drift apart (the parity tests
 * compare the messages with the Python readers').
 */
final class OptionRules {
    private OptionRules() {
    }

    /** The options with lower-cased names (Spark's options are case-insensitive). */
    static Map<String, String> lowered(Map<String, String> given) {
        Map<String, String> lower = new HashMap<>();
        for (Map.Entry<String, String> e : given.entrySet()) {
            lower.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
        }
        return lower;
    }

    /** Refuse any option of {@code opts} (lower-cased) not named in {@code valid}. */
    static void checkNames(String source, List<String> valid, Map<String, String> opts) {
        List<String> names = new ArrayList<>(valid);
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
            throw new ConfigException(source + ": unknown option(s) " + String.join(", ", unknown) + "; valid options: "
                + String.join(", ", names));
        }
    }

    /** {@code mode}: FAILFAST (the default), DROPMALFORMED or PERMISSIVE, any case. */
    static String mode(Map<String, String> opts) {
        String raw = opts.getOrDefault("mode", "FAILFAST").strip().toUpperCase(Locale.ROOT);
        if (!raw.equals("FAILFAST") && !raw.equals("DROPMALFORMED") && !raw.equals("PERMISSIVE")) {
            throw new ConfigException("option mode='" + raw + "': use one of FAILFAST, DROPMALFORMED, PERMISSIVE");
        }
        return raw;
    }

    /** An integer option of at least {@code minimum}; null when not given. */
    static Long intOption(Map<String, String> opts, String key, long minimum) {
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

    /** A true/false option (also 1/0, yes/no, any case); {@code dflt} when not given. */
    static boolean boolOption(Map<String, String> opts, String key, boolean dflt) {
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

    /** A comma-separated list of names, each stripped, in order, once; null when not given. */
    static Set<String> names(String raw) {
        if (raw == null) {
            return null;
        }
        Set<String> s = new LinkedHashSet<>();
        for (String n : raw.split(",", -1)) {
            s.add(n.strip());
        }
        return s;
    }
}
