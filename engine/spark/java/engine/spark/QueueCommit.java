package engine.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkEnv;

/**
 * The driver's half of the engine-queue sink's protocol, run by Python: the queue's producer
 * protocol (flocks, shared words) has one implementation, {@code engine.queue}, which the
 * JVM cannot join, so the check, the commit and the abort are {@code python -m
 * engine.spark.queuesink ACTION ...} (see that module), bounded by a timeout, their error one
 * line.  The interpreter: {@code spark.pyspark.python}, else {@code PYSPARK_PYTHON}, else
 * {@code python3}; it inherits this JVM's environment ({@code PYTHONPATH} included).
 */
final class QueueCommit {
    private QueueCommit() {
    }

    static String python() {
        SparkEnv env = SparkEnv.get();
        if (env != null && env.conf().contains("spark.pyspark.python")) {
            return env.conf().get("spark.pyspark.python");
        }
        String p = System.getenv("PYSPARK_PYTHON");
        return p == null || p.isEmpty() ? "python3" : p;
    }

    /** Run an action; its standard output's last line, or a ConfigException with its one-line error. */
    static String run(long timeoutSeconds, String... args) {
        List<String> cmd = new ArrayList<>(Arrays.asList(python(), "-m", "engine.spark.queuesink"));
        cmd.addAll(Arrays.asList(args));
        File out = null;
        File err = null;
        try {
            out = File.createTempFile("engine-queue-sink", ".out");
            err = File.createTempFile("engine-queue-sink", ".err");
            Process p = new ProcessBuilder(cmd).redirectOutput(out).redirectError(err).start();
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.destroyForcibly().waitFor();
                throw new ConfigException("engine-queue sink: '" + args[0] + "' did not finish within "
                    + timeoutSeconds + " s (option commitTimeoutSeconds); a committed job stays staged: "
                    + "engine spark cleanup DIR/QUEUE.sink finishes it");
            }
            if (p.exitValue() != 0) {
                String line = lastLine(err, "exit status " + p.exitValue());
                throw new ConfigException(line.startsWith("engine-queue sink:") ? line
                    : "engine-queue sink: " + cmd.get(0) + " -m engine.spark.queuesink " + args[0] + ": " + line);
            }
            return lastLine(out, "");
        } catch (IOException e) {
            throw new ConfigException("engine-queue sink: cannot run " + cmd.get(0) + " (" + e.getMessage()
                + "); set spark.pyspark.python or PYSPARK_PYTHON to a Python with engine installed");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new ConfigException("engine-queue sink: interrupted while running '" + args[0] + "'");
        } finally {
            for (File f : new File[] {out, err}) {
                if (f != null && !f.delete()) {
                    f.deleteOnExit();
                }
            }
        }
    }

    private static String lastLine(File f, String otherwise) throws IOException {
        List<String> lines = Files.readAllLines(f.toPath(), StandardCharsets.UTF_8);
        for (int i = lines.size() - 1; i >= 0; i--) {
            if (!lines.get(i).isBlank()) {
                return lines.get(i).strip();
            }
        }
        return otherwise;
    }
}
