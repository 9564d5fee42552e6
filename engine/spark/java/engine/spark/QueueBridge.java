package engine.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.spark.sql.SparkSession;

/**
 * The driver's consumer of a queue reader: a {@code python -m engine.spark.queuebridge} child
 * process holding {@code Queue.open_reader(directory, queue, reader)}, spoken to one line per
 * request (the protocol is that module's docstring).
 *
 * <p>Why a child process: the consumer protocol (reader locks are {@code flock}s, words shared
 * with the reader's other consumers, each consumer getting distinct items) has one implementation,
 * the Python package's, and the JVM cannot take a {@code flock} (see {@link WriterLock}). PySpark's
 * Py4J callback server (how {@code foreachBatch} calls Python) would need a Python driver and ties
 * a stuck call to a gateway thread; a child process works for any client, every request is bounded
 * by a timeout, and stopping the query kills it by its PID.
 *
 * <p>The interpreter: {@code spark.pyspark.driver.python}, {@code spark.pyspark.python},
 * {@code PYSPARK_DRIVER_PYTHON}, {@code PYSPARK_PYTHON}, else {@code python3}; it inherits the
 * driver's environment ({@code PYTHONPATH} included), so it imports the engine the driver does.
 */
final class QueueBridge implements AutoCloseable {
    /** Bound of starting the interpreter (it imports the engine) and of each request. */
    static final long START_MS = 120_000;
    static final long REQUEST_MS = 60_000;
    private static final String EOF = "\0eof";

    private final String what;
    private final Process process;
    private final Writer in;
    private final BlockingQueue<String> replies = new LinkedBlockingQueue<>();
    private final File errors;

    QueueBridge(String directory, String queue, String reader) {
        this.what = QueueOptions.SOURCE + " stream of queue '" + queue + "', reader '" + reader + "' in " + directory;
        String python = interpreter();
        try {
            errors = File.createTempFile("engine-queuebridge-", ".err");
            errors.deleteOnExit();
            ProcessBuilder pb = new ProcessBuilder(python, "-m", "engine.spark.queuebridge", directory, queue, reader);
            pb.redirectError(errors);
            process = pb.start();
        } catch (IOException e) {
            throw new ConfigException(what + ": cannot start its queue reader process (" + python
                + " -m engine.spark.queuebridge): " + e.getMessage()
                + "; set spark.pyspark.python or PYSPARK_PYTHON to a Python with engine installed");
        }
        in = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
        Thread pump = new Thread(() -> {
            try (BufferedReader out = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = out.readLine()) != null) {
                    replies.add(line);
                }
            } catch (IOException e) {
                // the process went away: EOF below
            }
            replies.add(EOF);
        }, "engine-queuebridge-" + process.pid());
        pump.setDaemon(true);
        pump.start();
        String first = reply(START_MS, "start");
        if (!first.equals("ready")) {
            throw failure("start", first);
        }
    }

    static String interpreter() {
        List<String> choices = new ArrayList<>();
        SparkSession s = SparkSession.getActiveSession().isDefined() ? SparkSession.active() : null;
        if (s != null) {
            choices.add(s.sparkContext().getConf().get("spark.pyspark.driver.python", null));
            choices.add(s.sparkContext().getConf().get("spark.pyspark.python", null));
        }
        choices.add(System.getenv("PYSPARK_DRIVER_PYTHON"));
        choices.add(System.getenv("PYSPARK_PYTHON"));
        for (String c : choices) {
            if (c != null && !c.isBlank()) {
                return c;
            }
        }
        return "python3";
    }

    /** The reply to {@code request} ("ok ..." split in words after "ok"). */
    synchronized String[] call(String request) {
        try {
            in.write(request + "\n");
            in.flush();
        } catch (IOException e) {
            throw failure(request, null);
        }
        String line = reply(REQUEST_MS, request);
        if (!line.startsWith("ok")) {
            throw failure(request, line);
        }
        String rest = line.substring(2).strip();
        return rest.isEmpty() ? new String[0] : rest.split(" ");
    }

    private String reply(long timeoutMs, String request) {
        String line;
        try {
            line = replies.poll(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            kill();
            throw new IllegalStateException(what + ": interrupted waiting for its queue reader process", e);
        }
        if (line == null) {
            kill();
            throw new IllegalStateException(what + ": its queue reader process (pid " + process.pid()
                + ") did not answer '" + request + "' within " + timeoutMs + " ms; killed");
        }
        return line;
    }

    private RuntimeException failure(String request, String line) {
        kill();
        if (line != null && line.startsWith("error ")) {
            String cause = line.substring(6);
            String message = what + ": " + cause;
            // The queue's own refusals (a bad name, a missing directory) are the user's to fix.
            return cause.startsWith("ConfigError") || cause.startsWith("FileNotFoundError")
                ? new ConfigException(message) : new IllegalStateException(message);
        }
        return new IllegalStateException(what + ": its queue reader process (pid " + process.pid() + ") "
            + (line == null || line.equals(EOF) ? "exited" : "answered '" + line + "'") + " on '" + request + "'"
            + lastError());
    }

    private String lastError() {
        try {
            List<String> lines = Files.readAllLines(errors.toPath(), StandardCharsets.UTF_8);
            for (int k = lines.size() - 1; k >= 0; k--) {
                if (!lines.get(k).isBlank()) {
                    return ": " + lines.get(k).strip();
                }
            }
        } catch (IOException e) {
            // nothing more to say
        }
        return "";
    }

    /** Ends the process by its PID (no checkpoint: the items it held stay unconfirmed). */
    void kill() {
        process.destroyForcibly();
    }

    /** Checkpoints and closes the reader, then ends the process (killed if it does not answer). */
    @Override
    public void close() {
        try {
            if (process.isAlive()) {
                call("close");
            }
        } catch (RuntimeException e) {
            // stopping: the reader's items stay unconfirmed, as after a crash
        } finally {
            kill();
            errors.delete();
        }
    }
}
