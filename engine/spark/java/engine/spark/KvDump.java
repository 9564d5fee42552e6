package engine.spark;

/**
 * The JVM key-value reader without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.KvDump key=value ... [columns=a,b]} plans and reads as the connector does
 * ({@link KvSource#plan}, {@link KvBatchReader}) and prints one line per row ({@code store tree
 * hex(key) hex(value)}, the corrupt record when PERMISSIVE), or {@code ERROR <type>: <message>};
 * see {@link DumpMain} for the arguments (several reads separated by {@code --}) and the
 * spelling of values.
 */
public final class KvDump {
    private KvDump() {
    }

    public static void main(String[] args) {
        DumpMain.main(args, new DumpMain.Format<KvSource.Options, KvSource.Part>(KvSource.Options::new,
            o -> KvSource.fullSchema(o.permissive()),
            (fs, o, schema) -> KvSource.plan(fs, o.inputPaths(fs), o, new KvSource.Bounds(o)).parts,
            (fs, p, schema, o) -> new KvBatchReader(fs.fresh(), p, schema, o.mode)));
    }
}
