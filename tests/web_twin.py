"""A web engine added as a team would add one: this runtime module, a harness module and a target line, and
nothing else (``test_bundle_engines.py`` writes the harness module and the target line at test time).

A second copy of TF.js under a name of its own: its page module is ``harness/tfjs-twin.mjs``."""
from portability.runtimes.tfjs import Tfjs

#: the harness module's text: TF.js's page module under this engine's name
PAGE_MODULE = "export {create} from './tfjs.mjs';\n"


class TfjsTwin(Tfjs):
    engine = "tfjs-twin"
