package engine.spark;

/**
 * The JVM twin of {@code engine.errors.PageError}: a page id that is free or past the store's
 * pages where a live page was expected; the message is the Python error's {@code str()}.
 */
public class PageException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    public final String path;
    public final long page;
    public final long offset;
    public final String reason;

    public PageException(String path, long page, long offset, String reason) {
        super(path + ": page " + page + " (byte offset " + offset + "): " + reason);
        this.path = path;
        this.page = page;
        this.offset = offset;
        this.reason = reason;
    }

    /** {@code engine.spark.batches.damage_text}. */
    public String damageText() {
        return "PageError: " + getMessage();
    }
}
