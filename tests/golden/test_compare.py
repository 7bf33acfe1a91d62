#!/usr/bin/env python3
"""The golden comparison's reading of rounding (golden.equate_noise): what two builds may differ in,
and what they may not. Standard library only (numpy, where installed, only speeds up a span)."""
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402


def report():
    return {
        "noise": {"output_rounding": 2.0e-7},
        "biases": [{"param": "b", "verdict": "redundant", "max_abs_delta": 1.0e-6, "mean_abs_delta": 2.0e-7,
                    "rel_delta": 3.0e-7, "noise_floor": 4.0e-6,
                    "structure": {"null_sigma_max": 3.0e-17, "kept_sigma_min": 0.5836,
                                  "rank_history": [3, 3]},
                    "null_basis": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]}],
        "sweep": {"series": [{"param": "b", "delta": [1.0e-7, 0.2, 5.0],
                              "noise_floor": [4.0e-6, 4.1e-6, 9.0e-6]}]},
    }


def differs(change):
    a, b = report(), report()
    change(b)
    golden.equate_noise(a, b)
    return golden.first_difference(a, b)


class EquateNoise(unittest.TestCase):
    def test_what_two_builds_may_differ_in(self):
        def builds(b):
            b["noise"]["output_rounding"] = 5.0e-7                    # rounding, 2.5x
            row = b["biases"][0]
            row["max_abs_delta"], row["mean_abs_delta"], row["rel_delta"] = 3.0e-6, 9.0e-7, 8.0e-7  # under the floor
            row["noise_floor"] = 1.1e-5
            row["structure"]["null_sigma_max"] = 4.0e-16              # both far below the tolerance
            row["structure"]["kept_sigma_min"] = 0.5837               # a bound's slack
            s = 0.5 ** 0.5
            row["null_basis"] = [[s, s, 0.0], [s, -s, 0.0]]           # the same plane
            b["sweep"]["series"][0]["delta"] = [6.0e-8, 0.2 + 3.0e-6, 5.0]  # within each point's floor
        self.assertIsNone(differs(builds))

    def test_what_they_may_not(self):
        cases = {
            "a verdict": lambda b: b["biases"][0].update(verdict="effective"),
            "a rank": lambda b: b["biases"][0]["structure"].update(rank_history=[3, 2]),
            "a change beyond the floor": lambda b: b["biases"][0].update(max_abs_delta=1.0e-5),
            "a floor 20 times larger": lambda b: b["biases"][0].update(noise_floor=8.0e-5),
            "a null singular value near the tolerance": lambda b: b["biases"][0]["structure"].update(null_sigma_max=1e-9),
            "a kept singular value": lambda b: b["biases"][0]["structure"].update(kept_sigma_min=0.59),
            "another null space": lambda b: b["biases"][0].update(null_basis=[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
            "a sweep point beyond its floor": lambda b: b["sweep"]["series"][0]["delta"].__setitem__(1, 0.2 + 1e-4),
            "a sweep floor no longer measured near the base": lambda b: b["sweep"]["series"][0]["noise_floor"].__setitem__(1, None),
            "a null basis collapsed to one vector": lambda b: b["biases"][0].update(null_basis=[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
            "a null basis with a zero vector": lambda b: b["biases"][0].update(null_basis=[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
            "a null basis with a null entry": lambda b: b["biases"][0].update(null_basis=[[1.0, 0.0, None], [0.0, 1.0, 0.0]]),
        }
        for what, change in cases.items():
            with self.subTest(what):
                self.assertIsNotNone(differs(change), what)

    def test_a_change_above_its_floor_is_held_in_each_of_its_figures(self):
        def base(r):
            r["biases"][0].update(max_abs_delta=0.4478, mean_abs_delta=0.155, rel_delta=0.32, noise_floor=1.7e-14)
        a, b = report(), report()
        base(a), base(b)
        b["biases"][0].update(mean_abs_delta=0.30, rel_delta=0.9)  # max the same: the rest is not
        golden.equate_noise(a, b)
        self.assertIsNotNone(golden.first_difference(a, b))
        a, b = report(), report()
        base(a), base(b)
        b["biases"][0].update(max_abs_delta=0.4478 + 1e-14, mean_abs_delta=0.155 + 1e-14, rel_delta=0.32 * (1 + 1e-13))
        golden.equate_noise(a, b)
        self.assertIsNone(golden.first_difference(a, b))

    def test_a_sweep_floor_measured_on_one_side_only(self):
        # rounding 2e-7: the engine measures no floor past far = 1.6e7 x 2e-7 = 3.2
        def point(r, delta, floor):
            r["sweep"]["series"][0]["delta"][2] = delta
            r["sweep"]["series"][0]["noise_floor"][2] = floor
        a, b = report(), report()
        point(a, 3.3, None), point(b, 3.1, 9.0e-6)
        golden.equate_noise(a, b)
        self.assertIsNotNone(golden.first_difference(a, b), "3.3 against 3.1 is no rounding")
        a, b = report(), report()
        point(a, 3.3, None), point(b, 3.3 + 2e-6, 9.0e-6)
        golden.equate_noise(a, b)
        self.assertIsNone(golden.first_difference(a, b))
        a, b = report(), report()
        point(a, 1e3, None), point(b, 1e3, 9.0e-6)  # far past the threshold: one side cannot have measured it
        golden.equate_noise(a, b)
        self.assertIsNotNone(golden.first_difference(a, b))

    def test_a_null_singular_value_near_the_tolerance_is_not_rounding(self):
        a, b = report(), report()
        a["biases"][0]["structure"]["null_sigma_max"] = 1e-9
        b["biases"][0]["structure"]["null_sigma_max"] = 9e-9
        golden.equate_noise(a, b)
        self.assertIsNotNone(golden.first_difference(a, b))

    def test_clusters_of_a_jacobian_that_is_rounding_alone(self):
        # Rank 0 on every input with a null singular value at the level of rounding, nonzero in at
        # least one build: which entries came out exactly zero is rounding, and so is the count of
        # clusters they make. With any rank, or with a Jacobian that is exactly zero in both, the
        # clusters are the Jacobian's structure.
        def clusters(history, a_count, b_count, sigma=(3.0e-17, 4.0e-16)):
            a, b = report(), report()
            for r, count, s in ((a, a_count, sigma[0]), (b, b_count, sigma[1])):
                r["biases"][0]["structure"].update(rank_history=history, clusters=count, null_sigma_max=s)
            golden.equate_noise(a, b)
            return golden.first_difference(a, b)
        self.assertIsNone(clusters([0, 0], 2, 3))
        self.assertIsNotNone(clusters([3, 3], 2, 3))
        self.assertIsNotNone(clusters([0, 1], 2, 3))
        self.assertIsNotNone(clusters([0, 0], 2, 3, sigma=(0.0, 0.0)))
        # Exactly zero in one build and rounding in the other is rounding too.
        self.assertIsNone(clusters([0, 0], 2, 3, sigma=(0.0, 4.0e-16)))
        # Above the noise a null singular value is not rounding alone.
        self.assertIsNotNone(clusters([0, 0], 2, 3, sigma=(1e-9, 2e-9)))

    def test_the_page_engines_memory_bound(self):
        # Where the page's engine holds the compiled copy of a fold's network (the CLI lends the
        # network its values instead), its bound may be larger than the CLI's, never smaller.
        # Anywhere else, the bound and its stage are the analysis's and are the same.
        compiled = golden.PAGE_FOLD_STAGE

        def bounds(stored, now, stored_stage="the network and a fold's copy of it", now_stage=compiled):
            a, b = report(), report()
            a["work"] = {"memory": {"bound": stored, "stage": stored_stage}}
            b["work"] = {"memory": {"bound": now, "stage": now_stage}}
            d = golden.page_engine_bound(a, b)
            return d or golden.first_difference(a, b)
        self.assertIsNone(bounds(21248.0, 25344.0))
        self.assertIsNone(bounds(2304.0, 2304.0))
        self.assertIsNotNone(bounds(25344.0, 21248.0))
        self.assertIsNotNone(bounds(25344.0, None))
        # At most 1.2 times the CLI's: the compiled copy is 8 bytes an entry where the CLI's
        # float32 copy is 4, over at most the network's entries again.
        self.assertIsNone(bounds(21248.0, 1.2 * 21248.0))
        self.assertIsNotNone(bounds(21248.0, 1.21 * 21248.0))
        self.assertIsNotNone(bounds(21248.0, 1000 * 21248.0))
        other = "the Gram matrix of b from its layers' factors (8 x 8)"
        self.assertIsNone(bounds(2304.0, 2304.0, other, other))
        self.assertIsNotNone(bounds(2304.0, 2560.0, other, other))
        self.assertIsNotNone(bounds(2304.0, 2304.0, other, "the network and a fold's copy of it"))

    def test_the_stored_report_is_left_alone(self):
        a, b = report(), report()
        b["biases"][0]["max_abs_delta"] = 3.0e-6
        kept = copy.deepcopy(a)
        golden.equate_noise(a, b)
        self.assertEqual(a, kept)
        self.assertEqual(b["biases"][0]["max_abs_delta"], 1.0e-6)


if __name__ == "__main__":
    unittest.main()
