import pytest


@pytest.fixture
def project(offline_project):
    return offline_project
