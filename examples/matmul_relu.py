"""C = relu(A @ B) with symbolic sizes: `polycomp compile examples/matmul_relu.py --target cuda`."""
import polycomp as pc

N, M, K = pc.sym("N M K")


@pc.tensor_expr
def matmul_relu(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
    k = pc.reduce_axis(K, "k")
    C = pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
    return pc.compute((N, M), lambda i, j: pc.max(C[i, j], 0.0), name="D")
