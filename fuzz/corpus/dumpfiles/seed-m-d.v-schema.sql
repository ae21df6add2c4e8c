/*!40101 SET NAMES binary*/;
CREATE TABLE `v`(
`id` int,
`a` int
)ENGINE=MyISAM;
