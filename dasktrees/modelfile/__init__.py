"""Model files: a fitted estimator as a JSON manifest plus raw arrays, and back, without pickle.

A model is a directory of two files (docs/models.md):

    model/
      manifest.json  estimator, parameters, fitted scalars, classes, feature names, bins, tree
                     counts, the dtype, shape and sha256 of every array, its own sha256
      arrays.npz     the numbers (np.savez); each field of the trees' shipped state
                     (``tree.wire``) concatenated over the trees:

                     value         = [ tree 0: n0 nodes | tree 1: n1 nodes | ... ]
                     children_left = [ tree 0: s0 split nodes | tree 1: s1 | ... ]  (local ids)

                     and a quantile forest's leaf targets, leaf after leaf (leaf_offsets, ...)

Loading parses JSON and reads plain arrays (an object array is refused from its header, before
any of its data is read), checks every array against the manifest and the trees' structure
(and a quantile forest's leaf targets) against what the prediction kernels assume, and builds
the estimator from an allowlist of dasktrees' own classes: nothing in a file names code to run.

The modules, lowest first (none imports the estimators but ``reading``, so that the estimators'
``save`` can call ``writing`` without a circle):

    format     the container: names, array dtypes, JSON forms of values, checksums, writing a
               directory atomically
    integrity  what loading checks: the manifest's fields, each array against the manifest, the
               trees' structure against what the prediction kernels assume
    writing    ``save``: a fitted estimator -> manifest and arrays
    reading    ``load`` and ``describe``: a checked directory -> an estimator of the allowlist
"""
