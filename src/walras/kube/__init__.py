"""The code that talks to the Kubernetes API: client construction, the operator's writes, the
node agents' calls and the NodeAllocation reader. The scheduling core and the simulator never
import it (an import contract in ``pyproject.toml`` enforces it)."""
