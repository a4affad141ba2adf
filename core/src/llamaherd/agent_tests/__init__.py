"""Agent tests and replay: test cases beside each agent (``agents/<name>/tests/*.toml``) run in
the agent's real runtime, fenced from production, with the model's side answered from a
cassette recorded at the provider contract; ``al test``, ``al record RUN``, ``al replay RUN``.

- ``cases``: the case file's format, reading and collecting cases;
- ``cassette``: the cassette file (a run's requests and the model's replies, normalised), the
  request digest and the readable difference between two requests;
- ``tape``: the provider wrapper that records and replays a run's model turns;
- ``fence``: the private engine a test run runs on (throwaway store, test credentials, no
  flow control, budgets, queues or lifecycle plugins);
- ``execute``: one case, start to end, and what its run did (``CaseRun``);
- ``expectations``: core's kinds of ``[expect]`` (a built-in plugin of
  ``register_expectations``) and the matchers they share;
- ``report``: the console report, ``--json`` and JUnit XML;
- ``record``: a case from a stored run (``al record``); ``replay``: ``al replay``.
"""
