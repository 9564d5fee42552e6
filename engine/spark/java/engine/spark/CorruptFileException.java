package engine.spark;

/**
 * The JVM twin of {@code engine.errors.CorruptFileError} (and, with {@code format}, of
 * {@code FormatError}): a damaged or foreign file, with the file and the offset.  The
 * message is byte for byte the Python error's {@code str()}, so a query fails with the
 * same words whichever reader found the damage.
 */
public class CorruptFileException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    public final String path;
    public final long offset;
    public final String expected;
    public final String found;
    public final boolean format;

    public CorruptFileException(String path, long offset, String expected, String found) {
        this(path, offset, expected, found, false);
    }

    public CorruptFileException(String path, long offset, String expected, String found, boolean format) {
        super(path + " at offset " + offset + ": expected " + expected + (found == null ? "" : ", found " + found));
        this.path = path;
        this.offset = offset;
        this.expected = expected;
        this.found = found;
        this.format = format;
    }

    /** The Python class name: what {@code _corrupt_record} and the parity tests print. */
    public String typeName() {
        return format ? "FormatError" : "CorruptFileError";
    }

    /** {@code engine.spark.batches.damage_text}: "CorruptFileError: path at offset ...". */
    public String damageText() {
        return typeName() + ": " + getMessage();
    }
}
