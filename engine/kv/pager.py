"""Decoded-node cache and page decoding shared by the writer and the readers.

Pages come from the page store (which checks each page against its checksum
when it reads it from the file); here they are decoded once and kept decoded,
keyed by page id.  Decoding errors become CorruptFileError with the store file's
path and the absolute offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import islice

from engine.errors import ConfigError, CorruptFileError, FormatError
from engine.kv import node as nodes
from engine.kv.descent import Found, LeafItems, LeafPairs, find_image, leaf_items_image, leaf_pairs_image
from engine.kv.node import Leaf, Node, NodeError, Overflow, TreeInfo, Value
from engine.native import kernel
from engine.pages import PageError

#: The node codec's compiled twins (``engine/kv/_native.c``) when built and not
#: switched off (``ENGINE_PURE_PYTHON``), else the pure functions of
#: :mod:`engine.kv.node`; chosen once per process, here.
#: decode_node(data, page_count, eager=False) -> Node (see :func:`engine.kv.node.decode_node`).
decode_node: Callable[..., Node] = kernel("kv.decode_node") or nodes.decode_node
#: leaf_image(keys, values, page_size) and branch_image(level, keys, children,
#: page_size): a node's page image (:func:`engine.kv.node.leaf_image`,
#: ``branch_image`` or their compiled twins).
leaf_image: Callable[[list[bytes], list[nodes.Value], int], bytes] = (
    kernel("kv.encode_leaf") or nodes.leaf_image
)
branch_image: Callable[[int, list[bytes], list[int], int], bytes] = (
    kernel("kv.encode_branch") or nodes.branch_image
)

#: diff_span(old, new, lo) -> (start, end): where a node's new image differs from its
#: committed one (:func:`engine.kv.node.diff_span` or its compiled twin).
diff_span: Callable[[bytes, bytes, int], tuple[int, int]] = kernel("kv.diff_span") or nodes.diff_span


#: find(images, root, height, key, page_count): a get over verified page images in
#: one call (:func:`engine.kv.descent.find_image` or its compiled twin).
find: Callable[[dict[int, bytes], int, int, bytes, int], Found] = kernel("kv.find") or find_image


#: leaf_items(images, root, height, seek, before, page_count): one leaf's keys and
#: values over verified page images in one call (:func:`engine.kv.descent.leaf_items_image`
#: or its compiled twin): a transaction's copy of a leaf.
leaf_items: Callable[[dict[int, bytes], int, int, bytes | None, bool, int], LeafItems] = (
    kernel("kv.leaf_items") or leaf_items_image
)

#: leaf_pairs(images, root, height, lower, upper, reverse, page_count): one leaf of a
#: scan, its (key, value) pairs in [lower, upper) over verified page images in one
#: call (:func:`engine.kv.descent.leaf_pairs_image` or its compiled twin).
leaf_pairs: Callable[[dict[int, bytes], int, int, bytes | None, bytes | None, bool, int], LeafPairs] = (
    kernel("kv.leaf_pairs") or leaf_pairs_image
)


def encode_node(node: Node, page_size: int) -> bytes:
    """A node's page image (:func:`engine.kv.node.leaf_image` / ``branch_image``
    or their compiled twins)."""
    if type(node) is Leaf:
        return leaf_image(node.keys, node.vals, page_size)
    return branch_image(node.level, node.keys, node.children, page_size)  # type: ignore[union-attr]

#: Decoded nodes kept by default: a tree of ~1.4 million 16-byte keys with
#: 100-byte values (a 4 KiB leaf of them costs 6-7 KiB: its page, which a lazy
#: leaf keeps and :class:`NodeCache` keeps as its image too, and its keys as
#: bytes objects), ~420 MB at most; a node that was decoded from something else
#: than its page (a branch, a node this writer changed) keeps its page image
#: besides, at most one page more per node (+256 MiB with 4 KiB pages, the bound
#: for a writer that rewrote every cached node).  Nothing else grows with the
#: store but the page store's checksums (4 bytes a page, read at open with the
#: header, free list and meta page; not the file whole), and a
#: get reads the pages on its path.
DEFAULT_CACHE_NODES = 65536


def check_cache_nodes(value: object) -> None:
    """ConfigError unless ``value`` is a whole count of nodes (``cache_nodes=``)."""
    if type(value) is not int or value < 0:
        raise ConfigError(f"cache_nodes must be an int >= 0, got {value!r}")


class NodeCache:
    """Decoded nodes by page id, and their verified page images (for :data:`find`,
    which descends over the images in one call); evicts the oldest entries past
    ``capacity``.

    Cached nodes and images are never changed: a transaction takes a node it
    changes out of the cache (:meth:`take`) and the commit puts it back
    (:meth:`update`), so one object may be handed to many readers.  An image is in ``images`` only
    while its node is cached, and only if it passed :func:`decode_node` (CRC and
    key order) or the writer encoded it.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._nodes: dict[int, Node] = {}
        #: Page images by page id: what :data:`find` reads (never changed in place).
        self.images: dict[int, bytes] = {}
        #: The node at a page, or None (the dict's own ``get``: no Python frame).
        self.get: Callable[[int], Node | None] = self._nodes.get

    def put(self, page: int, node: Node, image: bytes) -> None:
        """Keep ``node``, decoded (and so verified) from ``image``."""
        if not self.capacity:
            return
        nodes_ = self._nodes
        nodes_[page] = node
        self.images[page] = image
        if len(nodes_) > self.capacity:
            self._evict()

    def _evict(self) -> None:
        """Drop the oldest entries: down to 7/8 of the capacity (one pass per eighth, not per put)."""
        nodes_, images = self._nodes, self.images
        drop = len(nodes_) - self.capacity + max(1, self.capacity // 8)
        for old in list(islice(nodes_, drop)):
            del nodes_[old]
            images.pop(old, None)

    def take(self, page: int) -> tuple[Node, bytes] | None:
        """The node at ``page`` and its image, no longer cached (None if it was not):
        for a transaction to change the node in place instead of copying it."""
        node = self._nodes.pop(page, None)
        image = self.images.pop(page, None)
        if node is None or image is None:
            return None
        return node, image

    def update(self, changed: dict[int, Node], freed: Iterable[int], images: dict[int, bytes]) -> None:
        """After a commit: the transaction's nodes and their images replace the old
        ones, freed pages go."""
        nodes_ = self._nodes
        for page in freed:
            nodes_.pop(page, None)
            self.images.pop(page, None)
        if not self.capacity:
            return
        nodes_.update(changed)  # one C-level update (a page already cached keeps its place)
        self.images.update(images)
        if len(nodes_) > self.capacity:
            self._evict()

    def drop(self, pages: Iterable[int]) -> None:
        """Forget the nodes at ``pages`` (rewritten by a commit a reader takes)."""
        nodes_pop, images_pop = self._nodes.pop, self.images.pop
        for page in pages:
            nodes_pop(page, None)
            images_pop(page, None)

    def clear(self) -> None:
        self._nodes.clear()
        self.images.clear()

    def __len__(self) -> int:
        return len(self._nodes)


def decode_page(path: str, page: int, data: bytes, page_count: int, eager: bool = False) -> Node:
    """Decode a node page (``eager``: a leaf with its values sliced at once, see
    :func:`engine.kv.node.decode_node`); CorruptFileError naming the file and offset."""
    try:
        # (readers decode lazily, with the two arguments they always passed)
        return decode_node(data, page_count, True) if eager else decode_node(data, page_count)
    except NodeError as exc:
        raise CorruptFileError(path, page * len(data) + exc.offset, exc.expected, exc.found) from exc


def read_node(path: str, page: int, read: Callable[[int], bytes], page_count: int) -> Node:
    """Read and decode the node at ``page`` (a free or unallocated page id is damage too)."""
    return read_page_node(path, page, read, page_count)[0]


def read_page_node(
    path: str, page: int, read: Callable[[int], bytes], page_count: int, eager: bool = False
) -> tuple[Node, bytes]:
    """The node at ``page`` (:func:`read_node`; ``eager`` as :func:`decode_page`)
    and the page image it was decoded from."""
    try:
        data = read(page)
    except PageError as exc:
        raise CorruptFileError(path, exc.offset, "a pointer to a live node page", exc.reason) from exc
    if type(data) is not bytes:
        data = bytes(data)
    return decode_page(path, page, data, page_count, eager), data


def load_node(
    path: str, page: int, read: Callable[[int], bytes], page_count: int, cache: NodeCache, eager: bool = False
) -> Node:
    """:func:`read_node` (``eager`` as :func:`decode_page`), and the node and its
    page image kept in ``cache``."""
    found, data = read_page_node(path, page, read, page_count, eager)
    cache.put(page, found, data)
    return found


def leaf_of(
    path: str,
    images: dict[int, bytes],
    tree: TreeInfo,
    lower: bytes | None,
    upper: bytes | None,
    reverse: bool,
    page_count: int,
) -> LeafPairs:
    """:data:`leaf_pairs` over ``images``, its errors as CorruptFileError naming ``path``."""
    try:
        return leaf_pairs(images, tree.root, tree.height, lower, upper, reverse, page_count)
    except NodeError as exc:
        raise CorruptFileError(path, exc.offset, exc.expected, exc.found) from exc


def resolved(
    got: tuple[list[tuple[bytes, bytes | tuple[int, int]]], bytes | None, bytes | None, bool],
    value: Callable[[Value], bytes],
) -> tuple[list[tuple[bytes, bytes]], bytes | None, bytes | None]:
    """A leaf from :func:`leaf_of` as a scan's fetch returns it: its pairs with
    overflow values read (through ``value``), and its separator range."""
    pairs, lo, hi, overflow = got
    if overflow:
        pairs = [(k, v if type(v) is bytes else value(Overflow(*v))) for k, v in pairs]
    return pairs, lo, hi  # type: ignore[return-value]


def lookup(path: str, images: dict[int, bytes], tree: TreeInfo, key: bytes, page_count: int) -> Found:
    """:data:`find` over ``images``, its errors as CorruptFileError naming ``path``."""
    try:
        return find(images, tree.root, tree.height, key, page_count)
    except NodeError as exc:
        raise CorruptFileError(path, exc.offset, exc.expected, exc.found) from exc


def read_overflow(path: str, ref: Overflow, read: Callable[[int], bytes], page_size: int, page_count: int) -> bytes:
    """An overflow value (see :func:`overflow_chain`)."""
    return b"".join(chunk for _, chunk in overflow_chain(path, ref, read, page_size, page_count))


def overflow_chain(
    path: str, ref: Overflow, read: Callable[[int], bytes], page_size: int, page_count: int
) -> list[tuple[int, bytes]]:
    """(page, data) of each page of an overflow value's chain.  The chain must
    hold exactly ``ref.length`` bytes in as few pages as it takes, every page
    full but the last, so a damaged chain can neither loop nor run long."""
    per = page_size - nodes.HEAD
    want = max(1, -(-ref.length // per))
    out: list[tuple[int, bytes]] = []
    page = ref.page
    seen: set[int] = set()
    for i in range(want):
        if page in seen:
            raise CorruptFileError(path, page * page_size, "an overflow chain without a cycle", f"page {page} again")
        seen.add(page)
        try:
            data = read(page)
        except PageError as exc:
            raise CorruptFileError(path, exc.offset, "a live overflow page", exc.reason) from exc
        try:
            chunk, nxt = nodes.decode_overflow(data, page_count)
        except NodeError as exc:
            raise CorruptFileError(path, page * page_size + exc.offset, exc.expected, exc.found) from exc
        last = i == want - 1
        if len(chunk) != (ref.length - per * i if last else per) or bool(nxt) == last:
            raise CorruptFileError(
                path,
                page * page_size,
                f"overflow page {i + 1} of {want} for a {ref.length}-byte value",
                str(len(chunk)),
            )
        out.append((page, chunk))
        page = nxt
    return out


def read_meta(path: str, data: bytes, page_count: int) -> tuple[int, list[TreeInfo]]:
    """The meta page's commit counter and trees; FormatError for a plain page store."""
    if data[:8] != nodes.META_MAGIC:  # (nodes.is_meta inline: once per commit a reader takes)
        raise FormatError(path, len(data), "a key-value store's meta page (ENGKVDB1)", data[:8].hex(" "))
    try:
        return nodes.decode_meta(data, page_count)
    except NodeError as exc:
        raise CorruptFileError(path, len(data) + exc.offset, exc.expected, exc.found) from exc
