package engine.spark;

/**
 * The JVM events reader without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.EventsDump key=value ... [columns=a,b]} plans and reads as the connector does
 * ({@link EventsPlan#plan}, {@link EventsBatchReader}) and prints one line per row ({@code journal
 * persistence_id sequence_nr hex(payload)}, the corrupt record when PERMISSIVE), or
 * {@code ERROR <type>: <message>}; see {@link DumpMain} for the arguments (several reads
 * separated by {@code --}) and the spelling of values.
 */
public final class EventsDump {
    private EventsDump() {
    }

    public static void main(String[] args) {
        DumpMain.main(args, new DumpMain.Format<EventsOptions, EventsPlan.Part>(EventsOptions::new,
            o -> EventsSource.fullSchema(o.permissive()),
            (fs, o, schema) -> EventsPlan.plan(fs, o.inputPaths(fs), new EventsPlan.Bounds(o), o),
            (fs, p, schema, o) -> new EventsBatchReader(fs.fresh(), p, schema, o.mode)));
    }
}
