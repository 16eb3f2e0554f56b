"""numerics='ref' against the reference outputs of tests/data/golden/tiny-a with the
tolerances of the golden README section 7 (see dsv4mini/golden.py)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

from dsv4mini.golden import check_golden  # noqa: E402


class TinyAGoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.checks = check_golden(util.TINY_A)
        cls.report = "\n".join(str(c) for c in cls.checks)

    def select(self, *prefixes, expect=1):
        found = [c for c in self.checks if c.name.startswith(prefixes)]
        self.assertGreaterEqual(len(found), expect, f"missing checks {prefixes}\n{self.report}")
        for c in found:
            with self.subTest(check=c.name):
                self.assertTrue(c.passed, str(c))
        return found

    def test_isolated_blocks(self):
        # 6 blocks on prefill37, CSA and HCA blocks on prefill300 and 20 decode steps.
        self.assertEqual(len(self.select("isolated block", expect=10)), 10)

    def test_isolated_mtp(self):
        self.assertEqual(len(self.select("isolated MTP block", expect=2)), 2)

    def test_isolated_median(self):
        (median,) = self.select("isolated tests median")
        self.assertIn("over 12 tests", median.figures)

    def test_indexer_topk(self):
        self.assertEqual(len(self.select("indexer top-k", expect=4)), 4)

    def test_expert_ids(self):
        self.assertEqual(len(self.select("expert ids", expect=10)), 10)

    def test_end_to_end_logits(self):
        self.assertEqual(len(self.select("end-to-end prefill", "end-to-end decode",
                                         "end-to-end greedy", expect=5)), 5)

    def test_end_to_end_mtp_logits(self):
        self.assertEqual(len(self.select("end-to-end mtp", expect=2)), 2)


if __name__ == "__main__":
    unittest.main()
