"""The address a live class's join link and QR code give students (classroom/live/public_address.py): the server as a
student's laptop reaches it, never a loopback address that reaches only the server's own machine."""

import ipaddress

from classroom.live.public_address import SETTING, join_origin, network_address


def test_a_teacher_on_the_servers_own_machine_gets_the_machines_network_address_and_port():
    assert join_origin("http://127.0.0.1:8501/patterns?x=1", "", None, "192.0.2.7") == ("http://192.0.2.7:8501", None)
    assert join_origin("http://localhost:8501/", None, None, "192.0.2.7") == ("http://192.0.2.7:8501", None)
    assert join_origin("https://[::1]/", "0.0.0.0", None, "192.0.2.7") == ("https://192.0.2.7", None)


def test_a_teacher_who_reached_the_server_over_the_network_gives_that_address():
    assert join_origin("http://lab-server.local:8501/x", "", None, "192.0.2.7") == ("http://lab-server.local:8501", None)
    assert join_origin("http://10.4.0.12:8501/", "", None, "192.0.2.7") == ("http://10.4.0.12:8501", None)


def test_the_setting_wins_a_proxys_address_behind_nginx():
    named = "http://192.0.2.9:8500/"
    assert join_origin("http://127.0.0.1:8500/", "127.0.0.1", named, "192.0.2.7") == ("http://192.0.2.9:8500", None)


def test_a_server_listening_on_loopback_only_says_no_other_machine_can_open_the_link():
    origin, note = join_origin("http://127.0.0.1:8501/", "127.0.0.1", None, "192.0.2.7")
    assert origin == "http://127.0.0.1:8501"
    assert "listens on 127.0.0.1 only" in note and "--server.address 0.0.0.0" in note and SETTING in note
    origin, note = join_origin("http://127.0.0.1:8501/", "", None, None)
    assert origin == "http://127.0.0.1:8501" and "no network address" in note and SETTING in note


def test_this_machines_network_address_is_read_off_its_interfaces_and_is_not_loopback():
    found = network_address()
    assert found is None or not ipaddress.ip_address(found).is_loopback
