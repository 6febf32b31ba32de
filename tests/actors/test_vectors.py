"""actors.vectors: the stored bytes, cosine top-k and reciprocal rank fusion, with exact values."""

from __future__ import annotations

import struct
from array import array

import pytest

np = pytest.importorskip("numpy")

from actors.vectors import (  # noqa: E402
    RRF_K,
    VectorFormatError,
    VectorIndex,
    cosine_top_k,
    decode_matrix,
    decode_vector,
    encode_vector,
    normalize,
    reciprocal_rank_fusion,
)
from common.errors import InvalidInputError  # noqa: E402

# -- bytes -----------------------------------------------------------------------


def test_encode_is_little_endian_float32_and_nothing_else():
    blob = encode_vector([1.0, -2.0, 0.5])
    assert blob == bytes.fromhex("0000803f" "000000c0" "0000003f")
    assert blob == struct.pack("<3f", 1.0, -2.0, 0.5)


def test_encode_accepts_numpy_float64_and_array_f_alike():
    expected = struct.pack("<2f", 0.25, 3.0)
    assert encode_vector(np.array([0.25, 3.0], dtype=np.float64)) == expected
    assert encode_vector(array("f", [0.25, 3.0])) == expected
    assert encode_vector(np.array([0.25, 3.0], dtype=">f4")) == expected  # big-endian input, same bytes out


def test_encode_rounds_to_float32():
    assert decode_vector(encode_vector([0.1]))[0] == np.float32(0.1)


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]], [1.0, float("nan")], [float("inf")], ["x"], 3.0])
def test_encode_refuses_what_is_not_one_finite_row(bad):
    with pytest.raises(VectorFormatError):
        encode_vector(bad)


def test_vector_format_error_is_a_400_input_error():
    assert issubclass(VectorFormatError, InvalidInputError)
    assert VectorFormatError.status == 400


def test_decode_round_trips_and_returns_a_writable_native_array():
    v = decode_vector(struct.pack("<3f", 1.5, -0.25, 8.0), dimension=3)
    assert v.dtype == np.float32 and v.dtype.isnative
    assert v.tolist() == [1.5, -0.25, 8.0]
    v[0] = 2.0  # a copy, not a view of the bytes
    assert v[0] == 2.0


def test_decode_reads_memoryview_as_sqlite_and_psycopg_hand_it():
    assert decode_vector(memoryview(struct.pack("<2f", 1.0, 2.0))).tolist() == [1.0, 2.0]


@pytest.mark.parametrize(("data", "dim", "msg"), [
    (b"", None, "0 bytes"),
    (b"\x00" * 5, None, "5 bytes"),
    (b"\x00" * 8, 3, "has 2 dimensions, expected 3"),
])
def test_decode_names_the_length_problem(data, dim, msg):
    with pytest.raises(VectorFormatError, match=msg):
        decode_vector(data, dim)


def test_decode_matrix_stacks_rows_in_order():
    m = decode_matrix([struct.pack("<2f", 1, 2), struct.pack("<2f", 3, 4), struct.pack("<2f", 5, 6)], 2)
    assert m.shape == (3, 2) and m.dtype == np.float32
    assert m.tolist() == [[1, 2], [3, 4], [5, 6]]
    assert decode_matrix([], 4).shape == (0, 4)


def test_decode_matrix_names_the_first_bad_row():
    with pytest.raises(VectorFormatError, match="stored vector 1 has 12 bytes, expected 8"):
        decode_matrix([struct.pack("<2f", 1, 2), struct.pack("<3f", 1, 2, 3)], 2)
    with pytest.raises(VectorFormatError, match="dimension must be positive"):
        decode_matrix([], 0)


# -- cosine top-k ------------------------------------------------------------------


def test_normalize_scales_rows_and_leaves_zero_rows_zero():
    n = normalize([[3.0, 4.0], [0.0, 0.0]])
    assert n.tolist() == [[pytest.approx(0.6), pytest.approx(0.8)], [0.0, 0.0]]


def test_cosine_top_k_exact_scores_best_first():
    matrix = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [-3.0, 0.0], [0.0, 0.0]]
    hits = cosine_top_k([5.0, 0.0], matrix, 4)
    assert [i for i, _ in hits] == [0, 2, 1, 4]  # the zero row scores 0, ties 1 (0.0) by index
    assert hits[0][1] == pytest.approx(1.0)
    assert hits[1][1] == pytest.approx(2 ** -0.5)
    assert hits[2][1] == 0.0 and hits[3][1] == 0.0
    assert cosine_top_k([5.0, 0.0], matrix, 10)[-1] == (3, pytest.approx(-1.0))


def test_cosine_top_k_ties_keep_the_lower_row_first():
    matrix = [[0.0, 1.0], [2.0, 0.0], [1.0, 0.0], [3.0, 0.0]]
    assert [i for i, _ in cosine_top_k([1.0, 0.0], matrix, 2)] == [1, 2]
    assert [i for i, _ in cosine_top_k([1.0, 0.0], matrix, 3)] == [1, 2, 3]


def test_cosine_top_k_matches_a_full_sort_on_random_vectors():
    rng = np.random.default_rng(7)
    matrix = normalize(rng.standard_normal((2000, 32)).astype(np.float32))
    query = rng.standard_normal(32).astype(np.float32)
    scores = matrix @ normalize(query)
    expected = sorted(range(2000), key=lambda i: (-scores[i], i))[:25]
    hits = cosine_top_k(query, matrix, 25, normalized=True)
    assert [i for i, _ in hits] == expected
    assert [s for _, s in hits] == [float(scores[i]) for i in expected]


def test_cosine_top_k_edges_and_errors():
    assert cosine_top_k([1.0], np.zeros((0, 1)), 5) == []
    assert cosine_top_k([1.0], [[1.0]], 0) == []
    with pytest.raises(VectorFormatError, match="query has 3 dimensions, stored vectors have 2"):
        cosine_top_k([1.0, 0.0, 0.0], [[1.0, 0.0]], 1)
    with pytest.raises(VectorFormatError, match="k must be >= 0"):
        cosine_top_k([1.0], [[1.0]], -1)
    with pytest.raises(VectorFormatError, match="2-D"):
        cosine_top_k([1.0], [1.0], 1)


# -- reciprocal rank fusion ----------------------------------------------------------


def test_rrf_default_k_is_60():
    assert RRF_K == 60


def test_rrf_exact_scores_and_order():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "c", "d"]])
    assert fused == [
        ("b", 0.0 + 1 / 62 + 1 / 61),
        ("c", 0.0 + 1 / 63 + 1 / 62),
        ("a", 0.0 + 1 / 61),
        ("d", 0.0 + 1 / 63),
    ]


def test_rrf_k_changes_the_weights():
    assert reciprocal_rank_fusion([["a", "b"]], k=0) == [("a", 1.0), ("b", 0.5)]
    assert reciprocal_rank_fusion([["a"], ["a"]], k=1) == [("a", 1.0)]


def test_rrf_ties_go_to_the_better_rank_then_the_first_ranking():
    # equal scores, x reached rank 1 in the first ranking, y only in the second
    assert [k for k, _ in reciprocal_rank_fusion([["x", "y"], ["y", "x"]])] == ["x", "y"]
    assert [k for k, _ in reciprocal_rank_fusion([["y", "x"], ["x", "y"]])] == ["y", "x"]
    # one item in each ranking at rank 1: the first ranking's comes first
    assert [k for k, _ in reciprocal_rank_fusion([["t"], ["s"]])] == ["t", "s"]


def test_rrf_counts_a_repeated_key_once_at_its_best_rank():
    assert reciprocal_rank_fusion([["a", "a", "b"]]) == [("a", 0.0 + 1 / 61), ("b", 0.0 + 1 / 63)]


def test_rrf_limit_empty_and_bad_arguments():
    assert reciprocal_rank_fusion([["a", "b", "c"]], limit=2) == [("a", 0.0 + 1 / 61), ("b", 0.0 + 1 / 62)]
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []
    with pytest.raises(InvalidInputError, match="k must be >= 0"):
        reciprocal_rank_fusion([["a"]], k=-1)
    with pytest.raises(InvalidInputError, match="limit must be >= 0"):
        reciprocal_rank_fusion([["a"]], limit=-1)


# -- the in-memory index -------------------------------------------------------------


def test_vector_index_add_and_top_k_exact():
    index = VectorIndex("m", 2)
    index.add(["a", "b", "c"], [[1.0, 0.0], [0.0, 3.0], [2.0, 2.0]])
    assert len(index) == 3 and "b" in index and "z" not in index
    assert index.model == "m" and index.dimension == 2
    hits = index.top_k([4.0, 0.0], 2)
    assert [k for k, _ in hits] == ["a", "c"]
    assert hits[0][1] == pytest.approx(1.0) and hits[1][1] == pytest.approx(2 ** -0.5)
    assert index.top_k([1.0, 0.0], 0) == []
    assert VectorIndex("m", 2).top_k([1.0, 0.0], 3) == []


def test_vector_index_replaces_a_key_and_discards_with_the_last_row_moving_in():
    index = VectorIndex("m", 2)
    index.add(["a", "b", "c"], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    index.add(["b"], [5.0, 0.0])  # re-embedded: same key, new vector
    assert len(index) == 3
    assert [k for k, _ in index.top_k([1.0, 0.0], 2)] == ["a", "b"]  # equal scores: row order
    assert index.discard(["a", "zzz"]) == 1
    assert len(index) == 2 and "a" not in index
    assert [k for k, _ in index.top_k([1.0, 0.0], 5)] == ["b", "c"]
    assert index.discard(["b", "c"]) == 2 and len(index) == 0
    assert index.top_k([1.0, 0.0], 5) == []


def test_vector_index_grows_past_its_capacity_and_keeps_every_vector():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    index = VectorIndex("m", 8)
    for start in range(0, 300, 7):
        index.add(list(range(start, min(start + 7, 300))), vectors[start : start + 7])
    assert len(index) == 300 and index.nbytes >= 300 * 8 * 4
    expected = [i for i, _ in cosine_top_k(vectors[42], vectors, 10)]
    assert [k for k, _ in index.top_k(vectors[42], 10)] == expected


def test_vector_index_eligible_filter_walks_past_ineligible_best_hits():
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((1000, 16)).astype(np.float32)
    index = VectorIndex("m", 16)
    index.add(list(range(1000)), vectors)
    query = vectors[0]
    ranked = [i for i, _ in cosine_top_k(query, vectors, 1000)]
    calls = []

    def odd_only(key):
        calls.append(key)
        return key % 2 == 1

    hits = index.top_k(query, 5, eligible=odd_only)
    assert [k for k, _ in hits] == [i for i in ranked if i % 2 == 1][:5]
    assert len(calls) < 100  # windows of 10, 20, ...: far from all 1,000
    assert index.top_k(query, 5, eligible=lambda key: False) == []
    assert [k for k, _ in index.top_k(query, 3, eligible=lambda key: key in (999, 500))] == [
        i for i in ranked if i in (999, 500)
    ]


def test_vector_index_refuses_bad_input_and_stays_unchanged():
    index = VectorIndex("m", 2)
    index.add(["a"], [[1.0, 0.0]])
    with pytest.raises(VectorFormatError, match="expected 2 vectors of 2 dimensions"):
        index.add(["b", "c"], [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    with pytest.raises(VectorFormatError, match="a key appears twice"):
        index.add(["b", "b"], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(VectorFormatError, match="NaN or infinite"):
        index.add(["b"], [[float("nan"), 0.0]])
    assert len(index) == 1
    with pytest.raises(VectorFormatError, match="query has 3 dimensions, the index has 2"):
        index.top_k([1.0, 0.0, 0.0], 1)
    with pytest.raises(VectorFormatError, match="k must be >= 0"):
        index.top_k([1.0, 0.0], -1)
    with pytest.raises(VectorFormatError, match="dimension must be a positive integer"):
        VectorIndex("m", 0)
