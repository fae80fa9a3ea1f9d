"""The data model: the frozen values that cross the API, the one converter, the errors."""
