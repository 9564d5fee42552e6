package engine.spark;

/**
 * The JVM twin of {@code engine.errors.RecoveryNeededError}: a read-only reader found committed
 * work no writer has applied yet (a page store's FLUSHING mark, or its journal's transactions
 * with no live writer); the message is the Python error's {@code str()}.
 */
public class RecoveryNeededException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public RecoveryNeededException(String message) {
        super(message);
    }

    /** {@code engine.spark.batches.damage_text}. */
    public String damageText() {
        return "RecoveryNeededError: " + getMessage();
    }
}
