"""The status server: training pods report progress, the controller writes it on their job."""
