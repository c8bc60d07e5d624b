"""How the kernels that run once per node are compiled."""

from ..core.kernel_cache import kernel

# A full-depth tree has a node per one or two rows (flights: 126,000 nodes), so the kernels that
# run once per node (histograms, split search, partition) must cost nanoseconds in fixed costs.
#
# * No runtime (``_nrt=False``): with numba's runtime every array a kernel takes, unpacks from a
#   tuple or slices is reference counted by atomic increments and decrements, a large share of
#   a flights tree's time (perf; docs/benchmarks.md). Without it the compiler also refuses any
#   allocation: these kernels are allocation-free by construction, working in buffers the grower
#   allocates once per tree.
# * A numba array crosses a call as its seven or more fields, each a machine word: the split
#   search with its tuples of arrays took some 250 words on the stack per call. The per-node
#   steps that take those tuples (``find_split``, ``_open_node``, ``_record_split``,
#   ``_partition_node``) are therefore inlined into the growth loop; inlining the smaller kernels
#   as well was slower, so they stay calls.
# * Inlining costs compilation, once per call site: numba copies the callee's IR into the caller
#   (in time that grows with the callee's blocks times its variables, so nested inlining of big
#   functions took most of a minute) and the caller compiles the copy. The growth loop therefore
#   calls each inlined step from one place only, and the big steps do not inline each other
#   (only small helpers, such as the random stream's, are inlined into them). The categorical
#   steps of the search (``grower._pool_rare_categories``, ``grower._route_absent_categories``)
#   and the best-first heap's sifts are calls: inlined, they cost the loop kernel compilation
#   and gained no measurable speed (docs/benchmarks.md). The random splitter's cuts stay
#   inlined: as calls, extra-trees regression grew slower.
node_kernel = kernel(_nrt=False)
inlined_node_kernel = kernel(_nrt=False, inline="always")
