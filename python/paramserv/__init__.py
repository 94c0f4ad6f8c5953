"""paramserv: train your own model on a paramserv parameter server.

The client is a thin binding over paramserv's Go client, built as a C shared
library and called with ctypes: placement, key hashing, the chief's
initialisation, incarnations and recovery are the Go code's. Arrays are
numpy float32, read from and written into the caller's buffers in place.

Example (every worker runs this; ``paramserv local --ps=1 --workers=2 --
python3 train.py`` sets TF_CONFIG)::

    import numpy as np, paramserv

    with paramserv.Client(variables={"w": (3,)}, optimizer="sgd",
                          learning_rate=0.1) as c:
        c.start(init={"w": np.zeros(3, np.float32)} if c.is_chief else None)
        params = {"w": np.empty(3, np.float32)}
        grads = {"w": np.empty(3, np.float32)}
        c.pull(params)
        while c.step < 100:
            grads["w"][:] = params["w"] - 1    # d/dw of |w - 1|^2 / 2
            c.push_pull(grads, params)
        c.done()

``paramserv.torch`` puts a torch.nn.Module's parameters on the ps.
"""

from ._client import Client, ParamservError

__all__ = ["Client", "ParamservError"]
__version__ = "0.1.0"
