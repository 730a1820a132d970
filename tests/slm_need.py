"""The one rule for a test's optional dependency (tests/CMakeLists.txt): a module that cannot be
imported makes the test exit 77 (CTest: skipped) with "SKIP: python module NAME missing (HINT)".

    from slm_need import need
    tokenizers = need("tokenizers")            # the module object
    Tokenizer = need("tokenizers").Tokenizer

Import it with sys.path including tests/ (the scripts do sys.path.insert(0, dirname(dirname(
__file__)))); it uses only the standard library.
"""
import importlib
import sys


def need(name, hint="scripts/setup_test.sh installs it"):
    """Returns the imported module `name`, or exits 77 naming it when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        print(f"SKIP: python module {name} missing ({hint}): {e}")
        sys.exit(77)
