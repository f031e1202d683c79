"""The development loop: how long `make test` takes, warm and cold, and where the time goes (make_test.py)."""
