package engine.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The batch sources' reads without Spark, for the parity tests: what every {@code *Dump} main
 * ({@link LogDump}, {@link PagesDump}, {@link KvDump}, {@link EventsDump}, the {@code read} of
 * {@link QueueDump}) does, each giving only its format's {@link Format} (options, schema, plan,
 * batch reader).  Written once so that the text the Python side compares with
 * ({@code tests/spark/dump_parity.py}) has one spelling.
 *
 * <p>{@code java -cp ... engine.spark.XDump key=value ... [columns=a,b] [-- key=value ...]}: each
 * read's arguments are {@code key=value} options and an optional {@code columns=} list (the
 * schema pruned to them, the corrupt-record column kept); several reads in one JVM are separated
 * by {@code --}, their output by {@code --} lines.  A read plans and reads as the connector does
 * and prints one line per row, the columns tab-separated and spelled by their Spark type (strings
 * as they are, longs and timestamps as integers, booleans as Python's {@code True}/{@code False},
 * binary in hex, nulls as {@code None}), or {@code ERROR <type>: <message>} with the Python error
 * type the failure stands for.
 */
final class DumpMain {
    private DumpMain() {
    }

    /** Reads one partition's batches (the format's batch reader on a fresh file system). */
    @FunctionalInterface
    interface Opener<O, P> {
        PartitionReader<ColumnarBatch> open(Hfs fs, P part, StructType schema, O options);
    }

    /** Plans a read's parts as the connector's scan does. */
    @FunctionalInterface
    interface Planner<O, P> {
        List<P> plan(Hfs fs, O options, StructType schema);
    }

    /**
     * One format's read: its options parsed from the {@code key=value} map ({@link ConfigException}
     * when refused), its full schema for them, its plan and its batch reader.
     *
     * @param <O> the format's options class
     * @param <P> the format's planned part
     */
    static final class Format<O, P> {
        final Function<Map<String, String>, O> options;
        final Function<O, StructType> schema;
        final Planner<O, P> planner;
        final Opener<O, P> opener;

        Format(Function<Map<String, String>, O> options, Function<O, StructType> schema, Planner<O, P> planner,
               Opener<O, P> opener) {
            this.options = options;
            this.schema = schema;
            this.planner = planner;
            this.opener = opener;
        }
    }

    /** The whole main: the reads of {@code args} (split at {@code --}), their output printed at once. */
    static <O, P> void main(String[] args, Format<O, P> format) {
        List<String> one = new ArrayList<>();
        StringBuilder out = new StringBuilder();
        for (String a : args) {
            if (a.equals("--")) {
                read(one, format, out);
                out.append("--\n");
                one.clear();
            } else {
                one.add(a);
            }
        }
        read(one, format, out);
        print(out);
    }

    /** Prints what the dump gathered (at the end: an error mid-read still shows the rows before it). */
    static void print(StringBuilder out) {
        System.out.print(out);
        System.out.flush();
    }

    /** One read: its rows, or the error line after the rows read before the failure. */
    static <O, P> void read(List<String> args, Format<O, P> format, StringBuilder out) {
        Map<String, String> opts = new HashMap<>();
        String columns = null;
        for (String a : args) {
            int eq = a.indexOf('=');
            if (a.startsWith("columns=")) {
                columns = a.substring(eq + 1);
            } else {
                opts.put(a.substring(0, eq), a.substring(eq + 1));
            }
        }
        try {
            O o = format.options.apply(opts);
            StructType schema = pruned(format.schema.apply(o), columns);
            Hfs fs = new Hfs(new Configuration());
            for (P p : format.planner.plan(fs, o, schema)) {
                try (PartitionReader<ColumnarBatch> r = format.opener.open(fs, p, schema, o)) {
                    while (r.next()) {
                        ColumnarBatch b = r.get();
                        for (int i = 0; i < b.numRows(); i++) {
                            row(out, schema, b, i);
                        }
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);  // (the batch readers declare none: the interface does)
                }
            }
        } catch (CorruptFileException e) {
            error(out, e.typeName(), e.getMessage());
        } catch (PageException e) {
            error(out, "PageError", e.getMessage());
        } catch (RecoveryNeededException e) {
            error(out, "RecoveryNeededError", e.getMessage());
        } catch (ConfigException e) {
            error(out, "ConfigError", e.getMessage());
        } catch (UncheckedIOException e) {
            String type = e.getCause() instanceof java.io.FileNotFoundException ? "FileNotFoundError" : "OSError";
            error(out, type, e.getCause().getMessage());
        }
    }

    /** {@code ERROR <type>: <message>}: a failure as the Python side prints its exception. */
    static void error(StringBuilder out, String type, String message) {
        out.append("ERROR ").append(type).append(": ").append(message).append('\n');
    }

    /**
     * {@code full} cut to {@code columns} (comma-separated; null: all), in the schema's order; the
     * corrupt-record column always kept, as the connector keeps it for a pruned PERMISSIVE read.
     */
    static StructType pruned(StructType full, String columns) {
        if (columns == null) {
            return full;
        }
        List<String> keep = Arrays.asList(columns.split(","));
        return new StructType(Arrays.stream(full.fields())
            .filter(f -> keep.contains(f.name()) || f.name().equals(ScanParts.CORRUPT))
            .toArray(StructField[]::new));
    }

    /** Row {@code i} of {@code b}: its columns tab-separated, each spelled by its Spark type. */
    static void row(StringBuilder out, StructType schema, ColumnarBatch b, int i) {
        StructField[] fields = schema.fields();
        for (int c = 0; c < fields.length; c++) {
            if (c > 0) {
                out.append('\t');
            }
            value(out, fields[c], b.column(c), i);
        }
        out.append('\n');
    }

    /** One value as Python's {@code str} spells the reference reader's (bytes as {@code hex()}). */
    private static void value(StringBuilder out, StructField field, ColumnVector v, int i) {
        DataType t = field.dataType();
        if (v.isNullAt(i)) {
            out.append("None");
        } else if (t.equals(DataTypes.StringType)) {
            out.append(v.getUTF8String(i).toString());
        } else if (t.equals(DataTypes.LongType) || t.equals(DataTypes.TimestampType)) {
            out.append(v.getLong(i));  // (a timestamp: microseconds since the epoch)
        } else if (t.equals(DataTypes.IntegerType)) {
            out.append(v.getInt(i));
        } else if (t.equals(DataTypes.BooleanType)) {
            out.append(v.getBoolean(i) ? "True" : "False");
        } else if (t.equals(DataTypes.BinaryType)) {
            out.append(Py.hex(v.getBinary(i)));
        } else {
            throw new IllegalStateException("no dump spelling for column " + field.name() + " of type " + t);
        }
    }
}
