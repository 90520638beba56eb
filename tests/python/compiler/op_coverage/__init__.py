"""The op-coverage test (issue #27): lists of op cases (cases.py, typed_cases.py,
reduction_cases.py) run through the "plugin" compiler against eager by test_op_coverage.py."""
