"""The Debian packages whose message catalogs ``debian-catalogs`` reads (corpus/catalogs.py),
grouped by the kind of text they hold. Chosen by downloading candidates (the applications that
use KDE's ki18n, the ``*-l10n``/``*-i18n``/``*-locales`` packages, Xfce's plugins, games and the
common command-line tools of bookworm) and keeping those whose catalogs hold at least 30
translated messages for German, French or Spanish. GNOME's packages are left out (their
documentation is reserved for independent evaluation), and so are LibreOffice's (a source of
their own, corpus/libreoffice.py) and packages that repeat another's catalogs (gcc-11-locales,
qt6-translations-l10n).
"""

from __future__ import annotations


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Game dialogue and narration: Wesnoth's campaigns, one package each.
WESNOTH = tuple(f"wesnoth-1.16-{c}" for c in ("did", "dm", "dw", "ei", "httt", "l", "low", "nr", "sof", "sota",
                                              "sotbe", "thot", "trow", "tsg", "ttb", "utbs"))
KDE = _names("""
accountwizard akonadi-import-wizard akregator angelfish ark artikulate baloo-kf5 blinken bluedevil
calligraplan cantor cervisia choqok colord-kde digikam-data dolphin dolphin-plugins dragonplayer drkonqi elisa
filelight granatier gwenview haruna heaptrack-gui itinerary juk k4dirstat kaccounts-integration
kaccounts-providers kaffeine kalarm kalendar kamera kamoso kanagram kapman kapptemplate karbon kate katomic
kbackup kblackbox kblocks kbounce kbreakout kbruch kcachegrind kcalc kcharselect kcollectd kde-config-cddb
kde-config-cron kde-config-fcitx kde-config-fcitx5 kde-config-flatpak kde-config-mobile-networking
kde-config-screenlocker kde-config-sddm kde-config-systemd kde-config-tablet kde-config-telepathy-accounts
kde-spectacle kde-style-oxygen-qt5 kde-telepathy-call-ui kde-telepathy-contact-list
kde-telepathy-filetransfer-handler kde-telepathy-integration-module kde-telepathy-text-ui kdebugsettings
kdeconnect kdenetwork-filesharing kdenlive kdepim-addons kdepim-runtime kdepim-themeeditors kdesvn
kdevelop-l10n kdevelop-php-l10n kdevelop-python-l10n kdf kdialog kdiamond kdiff3 keditbookmarks kfind kfloppy
kfourinline kgeotag kget kgoldrunner kgpg khangman khelpcenter kig kigo killbots kimagemapeditor kinfocenter
kio kio-audiocd kiriki kiten kjots kjumpingcube kleopatra klickety kmag kmahjongg kmail kmenuedit kmines kmix
kmousetool kmouth kmplot knavalbattle knetwalk knights knotes kolf kollision kolourpaint kompare kongress
konq-plugins konqueror konquest konsole konsolekalendar kontact kontrast korganizer kpat kphotoalbum kraft
krdc krename kreversi krfb kronometer kross kruler krusader kscreen kshisen kshutdown ksirk ksnakeduel
kspaceduel ksquares ksudoku ksystemlog ksystemstats kteatime ktechlab ktikz ktimer ktimetracker ktrip kturtle
kubrick kwalletmanager kwave kwin-decoration-oxygen kwin-style-breeze kwordquiz latte-dock libkf5akonadi-data
libkf5akonadicalendar-data libkf5baloowidgets5 libkf5calendarsupport-data libkf5calendarutils5 libkf5cddb5
libkf5configwidgets-data libkf5contacts-data libkf5eventviews-data libkf5filemetadata-data libkf5i18n-data
libkf5imap-data libkf5incidenceeditor-data libkf5jsembed-data libkf5kcmutils-data libkf5kdegames7
libkf5kdelibs4support-data libkf5khtml-data libkf5ksieve-data libkf5ldap-data libkf5libkleo-data
libkf5mailcommon-data libkf5mailimporter5 libkf5mailtransport-data libkf5newstuff-data libkf5package-data
libkf5parts-data libkf5pimcommon-data libkf5pimtextedit-data libkf5purpose-bin libkf5sane-data
libkf5sysguard-data libkf5textwidgets-data libkf5tnef5 libkf5unitconversion-data libkf5wallet-data
libkf5xmlgui-data libkpmcore12 lokalize massif-visualizer neochat okular okular-extra-backends okular-mobile
partitionmanager picmi pim-data-exporter pim-sieve-editor plasma-bigscreen plasma-dialer plasma-firewall
plasma-framework plasma-mobile plasma-nm plasma-pa plasma-remotecontrollers plasma-runner-telepathy-contact
plasma-sdk plasma-settings plasma-systemmonitor plasma-thunderbolt plasma-vault plasma-welcome
polkit-kde-agent-1 print-manager qmlkonsole rocs rsibreak skanlite skanpage soundkonverter spacebar step
subtitlecomposer sweeper systemsettings xdg-desktop-portal-kde yakuake zanshin
""")

XFCE = _names("""
catfish libgarcon-common libxfce4ui-common mousepad parole ristretto thunar thunar-volman xfburn
xfce4-appfinder xfce4-battery-plugin xfce4-cpufreq-plugin xfce4-cpugraph-plugin xfce4-dict
xfce4-diskperf-plugin xfce4-indicator-plugin xfce4-mailwatch-plugin xfce4-mount-plugin xfce4-netload-plugin
xfce4-notifyd xfce4-panel xfce4-places-plugin xfce4-power-manager-data xfce4-pulseaudio-plugin
xfce4-screenshooter xfce4-sensors-plugin xfce4-session xfce4-settings xfce4-systemload-plugin
xfce4-taskmanager xfce4-terminal xfce4-timer-plugin xfce4-weather-plugin xfce4-whiskermenu-plugin
xfce4-windowck-plugin xfdesktop4-data xfwm4
""")

LXDE_CINNAMON = _names("""
cinnamon-l10n lxappearance lxhotkey-data lxpanel-data lxrandr lxsession-data lxtask lxterminal pcmanfm
""")

GAMES = _names("""
freeciv-data gnubg-data gnuchess minetest-data warzone2100-data wesnoth-1.16-data widelands-data
""")

QT = _names("""
compton-conf-l10n feathernotes-l10n featherpad-l10n gcompris-qt-data hydrogen-data libfm-qt-l10n liblxqt-l10n
libqscintilla2-qt5-l10n lximage-qt-l10n lxqt-about-l10n lxqt-admin-l10n lxqt-archiver-l10n lxqt-config-l10n
lxqt-globalkeys-l10n lxqt-notificationd-l10n lxqt-panel-l10n lxqt-powermanagement-l10n lxqt-runner-l10n
lxqt-session-l10n merkaartor meteo-qt-l10n musescore3-common nextcloud-desktop-l10n nm-tray-l10n
obconf-qt-l10n openshot-qt pavucontrol-qt-l10n pcmanfm-qt-l10n psi-plus-l10n qgis-common qpdfview-translations
qt5-style-kvantum-l10n qterminal-l10n qttranslations5-l10n scribus-data smplayer-l10n texstudio-l10n
valentina-l10n
""")

TOOLS = _names("""
a2ps acl apt aptitude-common aspell bash binutils-common bison cflow-l10n coreutils cpio debconf-i18n
diffutils dpkg e2fsprogs-l10n enscript findutils flex gawk gcc-12-locales gdbm-l10n gettext gettext-base git
gnupg-l10n grep grub-common gutenprint-locales iso-codes kbd krb5-locales libc-l10n libgammu-i18n
libgpg-error-l10n libgphoto2-l10n libosinfo-l10n libparted-i18n libpopt0 libsane-common libvirt-l10n make
man-db mc-data menu-l10n mutt nano neomutt network-manager postgresql-15 postgresql-client-15 procps psmisc
quota recode rpm-i18n sed sharutils synaptic sysstat tar texinfo util-linux-locales vim-runtime wdiff wget
wx3.2-i18n xkb-data xz-utils
""")

APPLICATIONS = _names("""
aegisub-l10n audacious audacity-data blender-data claws-mail-i18n darktable deluge-common fcitx-data
fcitx5-data filezilla-common galculator geany-common geeqie-common gimp gnucash-common gnupg1-l10n gpredict
gramps grisbi-common hexchat hexchat-common homebank-data inkscape k3b-i18n kicad kile-l10n krita-l10n
libktorrent-l10n libokteta-l10n phpmyadmin pidgin python3-django qtcurve-l10n sylpheed-i18n
transmission-common viking vlc-l10n xarchiver xfe-i18n zabbix-frontend-php
""")

PACKAGES: tuple[str, ...] = (*WESNOTH, *GAMES, *KDE, *XFCE, *LXDE_CINNAMON, *QT, *APPLICATIONS, *TOOLS)
