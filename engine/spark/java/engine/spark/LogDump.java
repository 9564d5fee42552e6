package engine.spark;

/**
 * The JVM log reader without Spark, for the parity tests: {@code java -cp ... engine.spark.LogDump
 * key=value ... [columns=a,b]} plans and reads as the connector does ({@link LogSource.LogScan},
 * {@link LogBatchReader}) and prints one line per row ({@code log segment index time time_ns flags
 * hex(data)}, the corrupt record when PERMISSIVE), or {@code ERROR <type>: <message>}; see
 * {@link DumpMain} for the arguments and the spelling of values.
 */
public final class LogDump {
    private LogDump() {
    }

    public static void main(String[] args) {
        DumpMain.main(args, new DumpMain.Format<LogOptions, LogPlan.Part>(LogOptions::new,
            o -> LogSource.fullSchema(o.permissive()),
            (fs, o, schema) -> new LogSource.LogScan(schema, o, fs).parts(),
            (fs, p, schema, o) -> new LogBatchReader(fs.fresh(), p, schema, o.mode, o.batchRecords, null)));
    }
}
