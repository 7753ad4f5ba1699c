"""Job scripts the tests run as ``python <script>`` in a process (and JVM) of their own. A
script that imports ``harness`` first puts ``tests/`` on ``sys.path``; the tests import the
constants they share with a script from here (``from jobs.<script> import ...``)."""
