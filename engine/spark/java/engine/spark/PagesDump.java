package engine.spark;

/**
 * The JVM pages reader without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.PagesDump key=value ... [columns=a,b]} plans and reads as the connector does
 * ({@link PagesSource#plan}, {@link PagesBatchReader}) and prints one line per row ({@code store
 * page offset free hex(data)}, the corrupt record when PERMISSIVE), or
 * {@code ERROR <type>: <message>}; see {@link DumpMain} for the arguments (several reads
 * separated by {@code --}) and the spelling of values.
 */
public final class PagesDump {
    private PagesDump() {
    }

    public static void main(String[] args) {
        DumpMain.main(args, new DumpMain.Format<PagesSource.Options, PagesSource.Part>(PagesSource.Options::new,
            o -> PagesSource.fullSchema(o.permissive()),
            (fs, o, schema) -> PagesSource.plan(fs, o.inputPaths(fs), o, new PagesSource.Bounds()),
            (fs, p, schema, o) -> new PagesBatchReader(fs.fresh(), p, schema, o.mode)));
    }
}
