"""How the kernels that run once per node are compiled."""

from numba import njit

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
#   steps that take those tuples (``find_split``, ``_open_node``, ``_split_node``) are therefore
#   inlined into the growth loop; inlining the smaller kernels as well was slower (and compiled
#   for minutes), so they stay calls.
node_kernel = njit(cache=True, _nrt=False)
inlined_node_kernel = njit(cache=True, _nrt=False, inline="always")
